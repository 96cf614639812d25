"""MCP adapter: the attribution tools served over the Model Context Protocol."""
