from ptebuild.cli import entrypoint

entrypoint()
