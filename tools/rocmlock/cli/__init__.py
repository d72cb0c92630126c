"""The command line: ``main`` (argv, exit codes, the subcommand table) and one module per stage of commands
(``build``, ``env``, ``lock``, ``upstream``; ``common`` for the options they share). Only this package turns
errors into messages and exit codes. Handlers import the stage they run when they run.

May import: rocmlock.errors, rocmlock.util, rocmlock.gpu, rocmlock.workspace, rocmlock.channel, rocmlock.lockdiff, rocmlock.lock, rocmlock.host, rocmlock.build, rocmlock.prefix, rocmlock.fleet, rocmlock.bundle, rocmlock.image, rocmlock.train, rocmlock.upstream.
"""
