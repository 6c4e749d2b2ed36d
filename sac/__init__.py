"""The ``sac`` command line. The SDK is ``sdk``; servers are ``server``."""
