"""`async with` for the client's objects: leaving the block closes them."""

from __future__ import annotations

from types import TracebackType
from typing import Self


class AsyncClosing:
    """Entering gives the object itself; leaving awaits its `aclose`."""

    async def aclose(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _tb: TracebackType | None,
    ) -> None:
        await self.aclose()
