"""Analysis core: the engine, its listeners (audit, export, enrichment) and small helpers."""
