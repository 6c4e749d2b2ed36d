"""Deterministic simulation: a RabbitMQ broker in memory and virtual time (quorum queues,
single active consumer, confirms, dead-lettering, faults), a dedup store that fails or is
slow, fault schedules drawn from a seed, replay and shrinking.

Pure: no sockets, threads, asyncio or wall clock; everything random comes from the seed.
"""
