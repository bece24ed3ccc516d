"""What runs inside a trial: the training loops, the data and models they read, and what
they report. Importing it gives bitsandbytes' logger a handler of its own: bitsandbytes
logs a warning at import on some CPUs (an optional kernel package it cannot load), which
Python would otherwise print to the terminal of `sweep validate`, `plan` or a trial."""

import logging

logging.getLogger("bitsandbytes").addHandler(logging.NullHandler())
