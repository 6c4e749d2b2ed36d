"""What the simulated broker itself promises, checked after a run: a message it committed
is never lost. It is still in a queue (ready, unacked, or waiting to be dead-lettered), or
a consumer acked it, or it left by a rule the queue was given (dropped past the delivery
limit without a dead-letter target, deleted by an operator)."""

from __future__ import annotations

from .world import World

ALLOWED_FATES = ("acked from ", "deleted from ", "dropped from ")


def broker_violations(world: World) -> list[str]:
    broker = world.broker
    held = {m.uid for q in broker.queues.values() for m in q.holding()}
    held |= {m.uid for pending in broker.dlx_pending.values() for m in pending}
    for log in broker.logs.values():
        held |= {cmd.message.uid for cmd in log.pending if cmd.message is not None}
    problems = []
    for uid, message in broker.committed.items():
        fate = broker.fate.get(uid)
        if uid in held or (fate is not None and fate.startswith(ALLOWED_FATES)):
            continue
        problems.append(f"committed message uid={uid} id={message.properties.message_id!r} "
                        f"was lost ({fate or 'no trace of it'})")
    return problems
