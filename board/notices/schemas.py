"""Notices as the API shows them: channels, deliveries (board-api.md, "Notices")."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from board.readmodels import IsoTime, ReadModel

ChannelKind = Literal["webhook", "slack", "email"]


class ChannelIn(BaseModel):
    """`POST …/notification-channels`: strict, unknown fields refused, every list bounded."""

    model_config = ConfigDict(alias_generator=to_camel, extra="forbid", strict=True)

    kind: ChannelKind
    url: str | None = Field(default=None, max_length=2000)
    emails: list[str] | None = Field(default=None, max_length=20)
    events: list[str] | None = Field(default=None, max_length=20)


class ChannelOut(ReadModel):
    channel_id: str
    kind: ChannelKind
    # A webhook's URL; a Slack URL is a credential and shown as its host only.
    url: str | None
    emails: list[str]
    events: list[str]
    created_at: IsoTime


class CreatedChannel(ChannelOut):
    """The answer to a new channel: a webhook's signing secret, this once only."""

    secret: str | None = Field(default=None, repr=False)


class ChannelList(ReadModel):
    channels: list[ChannelOut]


class DeliveryOut(ReadModel):
    delivery_id: int
    event_id: str
    type: str
    channel_id: str | None
    kind: str
    # An email address for mail to a person; none for a channel.
    recipient: str | None
    status: Literal["pending", "sending", "delivered", "failed"]
    attempts: int
    created_at: IsoTime
    last_attempt_at: IsoTime | None
    next_attempt_at: IsoTime | None
    delivered_at: IsoTime | None
    response_status: int | None
    response: str | None


class DeliveryList(ReadModel):
    notifications: list[DeliveryOut]


class QueuedTest(ReadModel):
    event_id: str
    delivery_id: int
    status: str
