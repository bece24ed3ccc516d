"""`python -m sweeper.cli`: how a Ray Job runs the sweep's driver on the cluster."""

from sweeper.cli._app import run

run()
