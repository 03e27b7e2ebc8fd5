"""Retiring a GPU: an admin says a missing GPU is gone for good (audited by the caller).

Only a GPU absent from its host's newest observation can be retired: one that reports
is plainly there. Retired, it stops counting as missing (no notice, no metric, off the
fleet page's missing list); if it ever reports again it counts as any other GPU, and is
missing again should it vanish after that (board.health.missing).
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncSession

from board.auth.deps import WorkspaceContext
from board.errors import Conflict, NotFound
from board.health.missing import listed_gpus
from board.health.schemas import RetiredGpuOut
from board.hosts.models import Gpu
from board.hosts.service import get_host_row

_RETIRE = text(
    """
    INSERT INTO gpu_retirements (workspace_id, gpu_id, retired_at, retired_by)
    VALUES (:ws, :gpu, :at, :by)
    ON CONFLICT (workspace_id, gpu_id)
    DO UPDATE SET retired_at = excluded.retired_at, retired_by = excluded.retired_by
    """
)


async def retire_gpu(
    session: AsyncSession, ctx: WorkspaceContext, host_id: str, gpu_uuid: str
) -> RetiredGpuOut:
    host = await get_host_row(session, ctx.workspace_id, host_id)
    gpu = await session.scalar(
        select(Gpu).where(
            Gpu.workspace_id == ctx.workspace_id, Gpu.host_id == host.id, Gpu.uuid == gpu_uuid
        )
    )
    if gpu is None:
        raise NotFound("No such GPU on this host.")
    if gpu.id in listed_gpus(host.latest_tick):
        raise Conflict(
            f"GPU {gpu.gpu_index} is in the host's newest observation: only a GPU that stopped "
            "reporting can be retired."
        )
    now = datetime.now(UTC)
    await session.execute(
        _RETIRE, {"ws": ctx.workspace_id, "gpu": gpu.id, "at": now, "by": ctx.user_id}
    )
    return RetiredGpuOut(
        host_id=str(host.public_id),
        uuid=gpu.uuid,
        index=gpu.gpu_index,
        name=gpu.name,
        retired_at=now,
    )
