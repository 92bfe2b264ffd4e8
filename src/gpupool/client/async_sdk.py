"""The asynchronous SDK: the job methods of ``Client`` over ``httpx.AsyncClient``.

What services that drive gpupool from an event loop need: jobs and arrays (submit, list,
follow, cancel, why), teams and pools, usage, costs and budgets. Operator methods (tokens, audit,
configuration) stay on the sync client. Requests are built by ``gpupool.client.wire`` and
``gpupool.client.usage`` exactly as the sync client builds them, and errors map through the same
table.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Self

import httpx

from gpupool.client import wire
from gpupool.client.errors import display_url, map_transport_errors, raise_for_response
from gpupool.client.models import (
    BudgetStatus,
    Job,
    JobArray,
    Page,
    Pool,
    Team,
    WhoAmI,
    WhyReport,
)
from gpupool.client.settings import resolve
from gpupool.client.usage import (
    UsageAttempt,
    UsageAttemptPage,
    UsageReport,
    attempts_request,
    report_params,
)


class AsyncClient:
    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout: float = 30,
    ) -> None:
        settings = resolve(url, token)
        self.url = settings.url
        self._timeout = timeout
        self._http = httpx.AsyncClient(
            base_url=settings.url,
            headers=wire.base_headers(settings.token),
            transport=transport,
            timeout=timeout,
        )

    def __repr__(self) -> str:
        return f"AsyncClient(url={display_url(self.url)!r})"

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def submit(
        self,
        command: list[str],
        *,
        team: str | None = None,
        gpus: int = 1,
        gpu_types: list[str] | None = None,
        nodes: int = 1,
        cpus: float | None = None,
        memory_gb: float | None = None,
        priority_class: str | None = None,
        name: str | None = None,
        kind: str | None = None,
        env: dict[str, str] | None = None,
        max_runtime_s: int | None = None,
        idempotency_key: str | None = None,
        backend: str | None = None,
        inputs: list[str] | None = None,
        outputs: list[str] | None = None,
        checkpoint_interval_s: int | None = None,
        image: str | None = None,
        image_pull_secret: str | None = None,
        container: dict[str, Any] | None = None,
    ) -> Job:
        """See ``Client.submit``."""
        body = wire.submit_body(
            command,
            team=team,
            gpus=gpus,
            gpu_types=gpu_types,
            nodes=nodes,
            cpus=cpus,
            memory_gb=memory_gb,
            priority_class=priority_class,
            name=name,
            kind=kind,
            backend=backend,
            env=env,
            inputs=inputs,
            outputs=outputs,
            max_runtime_s=max_runtime_s,
            checkpoint_interval_s=checkpoint_interval_s,
            image=image,
            image_pull_secret=image_pull_secret,
            container=container,
        )
        headers = wire.submit_headers(idempotency_key)
        answer = await self._request("POST", f"{wire.API}/jobs", json=body, headers=headers)
        return Job.model_validate(answer)

    async def submit_array(self, array: str, command: list[str], **options: Any) -> JobArray:
        """Submit a job array: one job per index of ``array`` (``0-999``, ``0-9:2``, ``1,3,5``),
        all stored in one request and one transaction. ``options`` are those of ``submit``;
        ``idempotency_key`` names the whole array. Each task sees ``GPUPOOL_ARRAY_JOB_ID`` and
        ``GPUPOOL_ARRAY_INDEX``; its job id is ``<array id>_<index>``."""
        key = options.pop("idempotency_key", None)
        body = wire.array_body(array, command, options)
        answer = await self._request(
            "POST", f"{wire.API}/arrays", json=body, headers=wire.submit_headers(key)
        )
        return JobArray.model_validate(answer)

    async def array(self, array_id: str) -> JobArray:
        """One job array with its tasks per status."""
        return JobArray.model_validate(await self._request("GET", wire.array_path(array_id)))

    async def cancel_array(self, array_id: str) -> JobArray:
        """Cancel every task of the array (queued ones at once, running ones are stopped);
        cancel one task with ``cancel("<array id>_<index>")``."""
        return JobArray.model_validate(
            await self._request("POST", wire.array_path(array_id, "cancel"))
        )

    async def jobs(
        self,
        team: str | None = None,
        status: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        *,
        group: bool = False,
        array: str | None = None,
    ) -> Page:
        """See ``Client.jobs``."""
        params = wire.jobs_params(team, status, limit, cursor, group, array)
        return Page.model_validate(await self._request("GET", f"{wire.API}/jobs", params=params))

    async def iter_jobs(
        self,
        team: str | None = None,
        status: str | None = None,
        page_size: int = 50,
        *,
        array: str | None = None,
    ) -> AsyncIterator[Job]:
        cursor: str | None = None
        while True:
            page = await self.jobs(
                team=team, status=status, limit=page_size, cursor=cursor, array=array
            )
            for job in page.items:
                yield job
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    async def job(self, job_id: str) -> Job:
        return Job.model_validate(await self._request("GET", wire.job_path(job_id)))

    async def cancel(self, job_id: str) -> Job:
        return Job.model_validate(await self._request("POST", wire.job_path(job_id, "cancel")))

    async def logs(self, job_id: str, offset: int = 0) -> tuple[bytes, int, bool]:
        response = await self._send("GET", wire.job_path(job_id, "logs"), params={"offset": offset})
        return wire.logs_result(response, offset)

    async def why(self, job_id: str) -> WhyReport:
        return WhyReport.model_validate(await self._request("GET", wire.job_path(job_id, "why")))

    async def follow_logs(self, job_id: str, offset: int = 0) -> AsyncIterator[bytes]:
        """Stream log bytes as they are written; the iterator ends when the job has finished."""
        # No read timeout: a healthy job may print nothing for longer than ``timeout``.
        timeout = httpx.Timeout(self._timeout, read=None)
        params: dict[str, str | int] = {"offset": offset, "follow": "true"}
        with map_transport_errors(self.url):
            async with self._http.stream(
                "GET", wire.job_path(job_id, "logs"), params=params, timeout=timeout
            ) as response:
                if not response.is_success:
                    await response.aread()
                    raise_for_response(response)
                async for chunk in response.aiter_bytes():
                    yield chunk

    # -- teams, pools, identity ------------------------------------------------------------

    async def teams(self) -> list[Team]:
        body = await self._request("GET", f"{wire.API}/teams")
        return [Team.model_validate(item) for item in body.get("items", [])]

    async def team(self, name: str) -> Team:
        """One team, including its members."""
        return Team.model_validate(await self._request("GET", wire.team_path(name)))

    async def pools(self) -> list[Pool]:
        body = await self._request("GET", f"{wire.API}/pools")
        return [Pool.model_validate(item) for item in body.get("items", [])]

    async def whoami(self) -> WhoAmI:
        return WhoAmI.model_validate(await self._request("GET", f"{wire.API}/whoami"))

    # -- usage, costs and budgets ------------------------------------------------------------

    async def usage(self, **query: Any) -> UsageReport:
        """See ``Client.usage``."""
        params = report_params(**query)
        return UsageReport.model_validate(
            await self._request("GET", f"{wire.API}/usage", params=params)
        )

    async def costs(self, **query: Any) -> UsageReport:
        """See ``Client.costs``."""
        params = report_params(**query)
        return UsageReport.model_validate(
            await self._request("GET", f"{wire.API}/costs", params=params)
        )

    async def usage_attempts(
        self, *, costs: bool = False, limit: int = 1000, cursor: str | None = None, **query: Any
    ) -> UsageAttemptPage:
        """One page of the per-attempt report (with costs when ``costs``)."""
        path, params = attempts_request(costs, limit, cursor, query)
        return UsageAttemptPage.model_validate(await self._request("GET", path, params=params))

    async def iter_usage_attempts(
        self, *, costs: bool = False, **query: Any
    ) -> AsyncIterator[UsageAttempt]:
        """Every attempt of the report, fetching pages lazily."""
        cursor: str | None = None
        while True:
            page = await self.usage_attempts(costs=costs, cursor=cursor, **query)
            for attempt in page.items:
                yield attempt
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    async def budgets(self, team: str | None = None) -> list[BudgetStatus]:
        """See ``Client.budgets``."""
        params = {"team": team} if team else {}
        body = await self._request("GET", f"{wire.API}/budgets", params=params)
        return [BudgetStatus.model_validate(item) for item in body.get("items", [])]

    # -- plumbing --------------------------------------------------------------------------

    async def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        with map_transport_errors(self.url):
            response = await self._http.request(method, path, **kwargs)
        raise_for_response(response)
        return response

    async def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        return (await self._send(method, path, **kwargs)).json()
