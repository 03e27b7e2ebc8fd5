"""A host's maintenance windows, and retiring a missing GPU (admins; audited)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Response

from board.audit.service import record
from board.auth.deps import AdminDep, ReaderDep
from board.db.deps import SessionDep
from board.errors import answers
from board.health import maintenance_windows as windows
from board.health.retire import retire_gpu
from board.health.schemas import RetiredGpuOut, WindowIn, WindowList, WindowOut
from board.hosts.models import Host
from board.hosts.service import get_host_row

router = APIRouter(prefix="/api/v1/workspaces/{slug}/hosts", tags=["fleet health"])


async def window_host(host_id: str, ctx: AdminDep, session: SessionDep) -> Host:
    """The host of the URL, looked up before the body is read: another workspace's host
    is a 404 whatever the body holds (a dependency runs before the body is validated)."""
    return await get_host_row(session, ctx.workspace_id, host_id)


WindowHostDep = Annotated[Host, Depends(window_host)]


@router.post(
    "/{host_id}/maintenance",
    status_code=201,
    response_model=WindowOut,
    summary="Plan a maintenance window",
    responses=answers(409, meaning={409: "The host has as many windows as it may have."}),
)
async def add_window(
    host: WindowHostDep, body: WindowIn, ctx: AdminDep, session: SessionDep
) -> WindowOut:
    """Once, or `recurrence` daily or weekly at the same local times in the workspace's
    zone (until `until`). A host inside a window raises no notice; its figures are
    unchanged."""
    made = await windows.add_window(session, ctx, host, body)
    await record(
        session,
        ctx,
        "maintenance.planned",
        target=made.host_id,
        detail={
            "windowId": made.window_id,
            "start": made.start.isoformat(),
            "end": made.end.isoformat(),
            "recurrence": made.recurrence,
        },
    )
    return made


@router.get("/{host_id}/maintenance", response_model=WindowList, summary="Maintenance windows")
async def list_windows(host_id: str, ctx: ReaderDep, session: SessionDep) -> WindowList:
    return WindowList(windows=await windows.list_windows(session, ctx, host_id))


@router.delete(
    "/{host_id}/maintenance/{window_id}",
    status_code=204,
    response_class=Response,
    summary="Remove a maintenance window",
)
async def remove_window(
    host_id: str, window_id: str, ctx: AdminDep, session: SessionDep
) -> Response:
    removed = await windows.remove_window(session, ctx, host_id, window_id)
    await record(
        session,
        ctx,
        "maintenance.removed",
        target=removed.host_id,
        detail={"windowId": removed.window_id},
    )
    return Response(status_code=204)


@router.post(
    "/{host_id}/gpus/{gpu_uuid}/retire",
    response_model=RetiredGpuOut,
    summary="Retire a missing GPU",
    responses=answers(409, meaning={409: "The GPU is in its host's newest observation."}),
)
async def retire(host_id: str, gpu_uuid: str, ctx: AdminDep, session: SessionDep) -> RetiredGpuOut:
    """A GPU gone for good: it stops counting as missing (notices, metrics, the fleet page)."""
    retired = await retire_gpu(session, ctx, host_id, gpu_uuid)
    await record(
        session,
        ctx,
        "gpu.retired",
        target=f"{retired.host_id} GPU {retired.index}",
        detail={"uuid": retired.uuid, "name": retired.name},
    )
    return retired
