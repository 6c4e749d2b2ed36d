"""The consumer's rooms, behind the faces in ``consumer.py``: the engine (``engine.py``) owns
the machine and wires the link and subscription (``link.py``), the shell (``shell.py``),
parking (``parking.py``), the guard (``guard.py``), the role poll (``role_poll.py``), and
where runs execute (``runs.py``, ``workers.py``, the loop's ``desk.py``)."""
