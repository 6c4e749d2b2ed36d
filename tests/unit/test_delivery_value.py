"""A ``Delivery`` is a value a handler cannot change: what it was given stays what the
consumer acks, parks or retries."""

from __future__ import annotations

import attrs
import pytest

from sac.sdk import Delivery


def make() -> Delivery:
    return Delivery(b"body", "id-1", {"k": 1}, False, None, "q", "rk", "ex")


@pytest.mark.parametrize("field", [f.name for f in attrs.fields(Delivery)])
def test_no_field_of_a_delivery_can_be_assigned(field: str) -> None:
    delivery = make()
    before = getattr(delivery, field)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        setattr(delivery, field, "changed")
    assert getattr(delivery, field) is before


def test_a_delivery_gains_no_new_attributes() -> None:
    delivery = make()
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        delivery.extra = 1  # type: ignore[attr-defined]
    assert not hasattr(delivery, "extra")


def test_value_is_the_body_unless_the_consumer_decoded_it() -> None:
    assert make().value == b"body"
    assert attrs.evolve(make(), value={"a": 1}).value == {"a": 1}
