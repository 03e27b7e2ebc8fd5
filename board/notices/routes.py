"""`…/notification-channels` and `…/notifications` (board-api.md, "Notices"); admins only."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, HTTPException, Path, Query, Response

from board.audit.deps import ClientAddressDep
from board.audit.service import record
from board.auth.deps import AdminDep
from board.db.deps import SessionDep
from board.errors import answers
from board.notices import service
from board.notices.schemas import ChannelIn, ChannelList, CreatedChannel, DeliveryList, QueuedTest
from board.settings import SettingsDep

router = APIRouter(prefix="/api/v1/workspaces/{slug}", tags=["notices"])

ChannelId = Annotated[str, Path(max_length=64)]


@router.post(
    "/notification-channels",
    status_code=201,
    response_model=CreatedChannel,
    summary="Add a notification channel",
    responses=answers(409, meaning={409: "The workspace has as many channels as it may."}),
)
async def create_channel(
    body: ChannelIn,
    ctx: AdminDep,
    session: SessionDep,
    settings: SettingsDep,
    address: ClientAddressDep,
) -> CreatedChannel:
    created = await service.create_channel(session, ctx, body, settings)
    detail = {"kind": created.kind, "events": ",".join(created.events)}
    await record(
        session,
        ctx,
        "notices.channel_added",
        target=created.channel_id,
        detail=detail,
        address=address,
    )
    return created


@router.get(
    "/notification-channels", response_model=ChannelList, summary="List notification channels"
)
async def list_channels(ctx: AdminDep, session: SessionDep) -> ChannelList:
    return ChannelList(channels=await service.list_channels(session, ctx.workspace_id))


@router.delete(
    "/notification-channels/{channel_id}", status_code=204, summary="Remove a notification channel"
)
async def remove_channel(
    channel_id: ChannelId, ctx: AdminDep, session: SessionDep, address: ClientAddressDep
) -> Response:
    channel_id = service.canonical_channel_id(channel_id)
    await service.remove_channel(session, ctx, channel_id)
    await record(session, ctx, "notices.channel_removed", target=channel_id, address=address)
    return Response(status_code=204)


@router.post(
    "/notification-channels/{channel_id}/test",
    status_code=202,
    response_model=QueuedTest,
    summary="Send a test notice",
    responses={429: {"description": "The channel's or the workspace's test notices for now."}},
)
async def send_test_notice(
    channel_id: ChannelId, ctx: AdminDep, session: SessionDep, address: ClientAddressDep
) -> QueuedTest:
    channel_id = service.canonical_channel_id(channel_id)
    try:
        queued = await service.send_test(session, ctx, channel_id)
    except service.TestsLimited as exc:
        headers = {"Retry-After": str(exc.retry_after)}
        raise HTTPException(429, exc.detail, headers=headers) from None
    await record(session, ctx, "notices.test_sent", target=channel_id, address=address)
    return queued


@router.get("/notifications", response_model=DeliveryList, summary="List notice deliveries")
async def list_deliveries(
    ctx: AdminDep,
    session: SessionDep,
    status: Annotated[Literal["pending", "sending", "delivered", "failed"] | None, Query()] = None,
) -> DeliveryList:
    return DeliveryList(
        notifications=await service.list_deliveries(session, ctx.workspace_id, status)
    )


@router.post(
    "/notifications/{delivery_id}/retry",
    status_code=204,
    summary="Retry a failed delivery",
    responses=answers(409, meaning={409: "Only a failed delivery can be retried."}),
)
async def retry_delivery(
    delivery_id: Annotated[int, Path(ge=1, le=2**62)],
    ctx: AdminDep,
    session: SessionDep,
    address: ClientAddressDep,
) -> Response:
    await service.retry_delivery(session, ctx, delivery_id)
    await record(session, ctx, "notices.retried", target=str(delivery_id), address=address)
    return Response(status_code=204)
