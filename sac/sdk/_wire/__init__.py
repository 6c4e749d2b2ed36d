"""The AMQP wire: what the SDK reads and writes itself instead of through pika's frame objects.

- ``frames.py``: published frames encoded by us (pure: bytes in, bytes out).
- ``deliveries.py``: deliveries to our consumers decoded from the received bytes (pure).
- ``pika_hooks.py``: the one module that touches pika's internals (its connection subclass
  and private attributes); it checks at import that every hook it needs is still there.

Nothing outside this folder may use a private pika name (``tests/unit/test_architecture.py``).
"""
