"""CLI subcommands: every module here exposes ``register(subparsers)``; ``pipelines.cli`` finds them."""
