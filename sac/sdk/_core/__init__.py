"""Pure decisions shared by the asyncio and the blocking faces: no pika, no sockets, no clocks
of their own (time and randomness come in as arguments), unit-tested without a broker."""
