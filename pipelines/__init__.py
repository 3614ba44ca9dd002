"""The pipeline definition, the ``ctpipe`` command and its subcommands, the local runner, deploy, the triggers."""
