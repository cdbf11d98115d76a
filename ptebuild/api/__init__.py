"""The library's entry points: one module per thing a user asks of ptebuild.

The command line (:mod:`ptebuild.cli`) is one client of these functions; a notebook, a CI script
or another tool is another. They raise :mod:`ptebuild.errors` exceptions and never print or exit;
what happened comes back as typed reports. The package ``ptebuild`` re-exports them.
"""
