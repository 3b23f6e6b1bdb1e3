"""One workspace's server, the composition root: storage + runtime + front doors +
transports.

- :mod:`~appserver.server.config`: ``ServerConfig``, everything that shapes one server;
- :mod:`~appserver.server.app`: ``AppServer``, composing the parts and their lifetime
  (open, complete a deferred start, drain);
- :mod:`~appserver.server.connections`: serving clients, one connection per transport;
- :mod:`~appserver.server.background`: work a server runs beside its requests;
- :mod:`~appserver.server.process`: ``run``, a server process until EOF or a signal.
"""
