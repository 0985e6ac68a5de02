"""One module per CLI subcommand: ``register(subparsers)`` adds its parser and handler."""
