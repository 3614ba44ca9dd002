"""The pipeline definitions, the ``ctpipe`` command and its subcommands, the triggers."""

import time

# The earliest moment ctpipe's own code runs in a ``ctpipe`` process: the CLI's start-up is measured from
# here when the process itself is older than its interpreter (a shell that exec'd ``ctpipe``).
LOADED_AT = time.time()
