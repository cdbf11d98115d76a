"""The warm worker server: torch and executorch imported once, kept between builds.

:mod:`ptebuild.daemon.protocol` is the wire format, the toolchain id and the socket's place;
:mod:`ptebuild.daemon.server` is the server process; the client side is the ``daemon`` executor
(:mod:`ptebuild.builder.executors.daemon`), and ``ptebuild workers status|stop`` inspects and
stops servers. Nothing in this package imports torch except the server, after it started.
"""
