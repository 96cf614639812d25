"""The `relaunch` console script: one entry point, one module per subcommand."""
