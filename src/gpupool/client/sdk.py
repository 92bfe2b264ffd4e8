"""The synchronous SDK: one method per REST endpoint of docs/architecture.md §7.

    with Client() as gp:                      # GPUPOOL_URL / GPUPOOL_TOKEN, or pass them
        job = gp.submit(["python", "train.py"], gpus=2, gpu_types=["h100", "t4"])
        for chunk in gp.follow_logs(job.id):
            sys.stdout.buffer.write(chunk)

Every method returns a read model or raises a ``GpupoolError`` subclass; httpx exceptions never
escape. Tests (and anyone embedding the SDK) pass ``transport=`` — e.g. ``httpx.MockTransport`` or
``gpupool.client.testing.FakeApi().transport`` — instead of patching anything.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import date, datetime
from typing import Any, Self
from urllib.parse import quote

import httpx

from gpupool.client import wire
from gpupool.client.errors import display_url, map_transport_errors, raise_for_response
from gpupool.client.models import (
    ApiToken,
    AuditEntry,
    AuditPage,
    BudgetSet,
    BudgetStatus,
    ConfigApplied,
    ConfigDiff,
    ConfigVersion,
    Job,
    JobArray,
    NewApiToken,
    Page,
    Pool,
    Team,
    WebhookDelivery,
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
from gpupool.core.tokens import token_id_of


class Client:
    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        transport: httpx.BaseTransport | None = None,
        timeout: float = 30,
    ) -> None:
        settings = resolve(url, token)
        self.url = settings.url
        self._timeout = timeout
        self._http = httpx.Client(
            base_url=settings.url,
            headers=wire.base_headers(settings.token),
            transport=transport,
            timeout=timeout,
        )

    def __repr__(self) -> str:
        return f"Client(url={display_url(self.url)!r})"

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- jobs ------------------------------------------------------------------------------

    def submit(
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
        """Submit a job. ``gpus`` is per node; ``gpu_types`` is an ordered preference.

        With the same ``idempotency_key`` a retry returns the job created the first time.
        ``image`` runs the command in that OCI image (the pool must allow it), with
        ``container`` = ``{"mounts": [{"source", "target", "read_only"}], "shm_size_gb",
        "read_only_root"}`` and ``image_pull_secret`` naming the pool's registry credentials.
        """
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
        return Job.model_validate(
            self._request("POST", f"{wire.API}/jobs", json=body, headers=headers)
        )

    def submit_spec(
        self, spec: Mapping[str, Any], idempotency_key: str | None = None
    ) -> Job | JobArray:
        """Submit a job written as the API's submit body (e.g. loaded from a job spec file);
        with an ``array`` field, a job array. The server names any field it refuses."""
        headers = wire.submit_headers(idempotency_key)
        if spec.get("array") is not None:
            answer = self._request("POST", f"{wire.API}/arrays", json=dict(spec), headers=headers)
            return JobArray.model_validate(answer)
        answer = self._request("POST", f"{wire.API}/jobs", json=dict(spec), headers=headers)
        return Job.model_validate(answer)

    def submit_array(self, array: str, command: list[str], **options: Any) -> JobArray:
        """Submit a job array: one job per index of ``array`` (``0-999``, ``0-9:2``, ``1,3,5``),
        all stored in one request and one transaction. ``options`` are those of ``submit``;
        ``idempotency_key`` names the whole array. Each task sees ``GPUPOOL_ARRAY_JOB_ID`` and
        ``GPUPOOL_ARRAY_INDEX``; its job id is ``<array id>_<index>``."""
        key = options.pop("idempotency_key", None)
        body = wire.array_body(array, command, options)
        answer = self._request(
            "POST", f"{wire.API}/arrays", json=body, headers=wire.submit_headers(key)
        )
        return JobArray.model_validate(answer)

    def array(self, array_id: str) -> JobArray:
        """One job array with its tasks per status."""
        return JobArray.model_validate(self._request("GET", wire.array_path(array_id)))

    def cancel_array(self, array_id: str) -> JobArray:
        """Cancel every task of the array (queued ones at once, running ones are stopped);
        cancel one task with ``cancel("<array id>_<index>")``."""
        return JobArray.model_validate(self._request("POST", wire.array_path(array_id, "cancel")))

    def jobs(
        self,
        team: str | None = None,
        status: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        *,
        group: bool = False,
        array: str | None = None,
    ) -> Page:
        """One page of jobs, newest first as the server orders them. ``group``: a job array
        stands as one job and ``Page.arrays`` counts its tasks; ``array``: only its tasks."""
        params = wire.jobs_params(team, status, limit, cursor, group, array)
        return Page.model_validate(self._request("GET", f"{wire.API}/jobs", params=params))

    def iter_jobs(
        self,
        team: str | None = None,
        status: str | None = None,
        page_size: int = 50,
        *,
        array: str | None = None,
    ) -> Iterator[Job]:
        """Every matching job, fetching pages lazily by following ``next_cursor``."""
        cursor: str | None = None
        while True:
            page = self.jobs(team=team, status=status, limit=page_size, cursor=cursor, array=array)
            yield from page.items
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    def job(self, job_id: str) -> Job:
        """One job with its attempts."""
        return Job.model_validate(self._request("GET", wire.job_path(job_id)))

    def cancel(self, job_id: str) -> Job:
        return Job.model_validate(self._request("POST", wire.job_path(job_id, "cancel")))

    def logs(self, job_id: str, offset: int = 0) -> tuple[bytes, int, bool]:
        """Log bytes from ``offset``: ``(data, next_offset, complete)``."""
        response = self._send("GET", wire.job_path(job_id, "logs"), params={"offset": offset})
        return wire.logs_result(response, offset)

    def follow_logs(self, job_id: str, offset: int = 0) -> Iterator[bytes]:
        """Stream log bytes as they are written; the iterator ends when the job has finished."""
        # No read timeout: a healthy job may print nothing for longer than ``timeout``.
        timeout = httpx.Timeout(self._timeout, read=None)
        params: dict[str, str | int] = {"offset": offset, "follow": "true"}
        with (
            map_transport_errors(self.url),
            self._http.stream(
                "GET", wire.job_path(job_id, "logs"), params=params, timeout=timeout
            ) as response,
        ):
            if not response.is_success:
                response.read()
                raise_for_response(response)
            yield from response.iter_bytes()

    def why(self, job_id: str) -> WhyReport:
        """Why a job is still pending, per gpu type."""
        return WhyReport.model_validate(self._request("GET", wire.job_path(job_id, "why")))

    # -- teams, pools, identity ------------------------------------------------------------

    def teams(self) -> list[Team]:
        body = self._request("GET", f"{wire.API}/teams")
        return [Team.model_validate(item) for item in body.get("items", [])]

    def team(self, name: str) -> Team:
        """One team, including its members."""
        return Team.model_validate(self._request("GET", wire.team_path(name)))

    def pools(self) -> list[Pool]:
        body = self._request("GET", f"{wire.API}/pools")
        return [Pool.model_validate(item) for item in body.get("items", [])]

    def whoami(self) -> WhoAmI:
        return WhoAmI.model_validate(self._request("GET", f"{wire.API}/whoami"))

    # -- API tokens ----------------------------------------------------------------------

    def create_token(self, description: str = "", ttl_days: float | None = None) -> NewApiToken:
        """A new API token for the caller (it expires: by default in 90 days)."""
        body: dict[str, Any] = {"description": description}
        if ttl_days is not None:
            body["ttl_days"] = ttl_days
        return NewApiToken.model_validate(self._request("POST", f"{wire.API}/tokens", json=body))

    def tokens(self, user: str | None = None) -> list[ApiToken]:
        """The caller's tokens, newest first (a platform admin: ``user``'s, or everyone's)."""
        params = {"user": user} if user else None
        body = self._request("GET", f"{wire.API}/tokens", params=params)
        return [ApiToken.model_validate(item) for item in body.get("items", [])]

    def revoke_token(self, token: str) -> ApiToken:
        """Revoke a token, named as printed (``gpt_<id>_<secret>``) or by its id; only the id
        is sent."""
        token_id = quote(token_id_of(token), safe="")
        return ApiToken.model_validate(self._request("DELETE", f"{wire.API}/tokens/{token_id}"))

    def health(self) -> dict[str, Any]:
        """``GET /healthz`` (needs no token); raises ``ConnectionFailed`` if nobody answers."""
        body: dict[str, Any] = self._request("GET", "/healthz")
        return body

    # -- audit ---------------------------------------------------------------------------

    def audit(
        self,
        *,
        team: str | None = None,
        actor: str | None = None,
        action: str | None = None,
        outcome: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> AuditPage:
        """One page of the audit trail, newest first (platform admins; team admins: their
        teams' entries). ``since`` is inclusive, ``until`` exclusive."""
        params = wire.audit_params(
            team=team,
            actor=actor,
            action=action,
            outcome=outcome,
            since=since,
            until=until,
            limit=limit,
            cursor=cursor,
        )
        return AuditPage.model_validate(self._request("GET", f"{wire.API}/audit", params=params))

    def iter_audit(self, *, page_size: int = 100, **filters: Any) -> Iterator[AuditEntry]:
        """Every matching entry, newest first, fetching pages lazily."""
        cursor: str | None = None
        while True:
            page = self.audit(limit=page_size, cursor=cursor, **filters)
            yield from page.items
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    # -- usage and costs ------------------------------------------------------------------

    def usage(self, **query: Any) -> UsageReport:
        """GPU-hours within quota, borrowed and idle share, per period and group. ``query``:
        ``team``, ``start``/``end`` (dates or times; ``end`` defaults to now) or ``period``
        (day, week, month, quarter, year) holding the date ``at``, and ``group_by`` (team,
        user, gpu_type, pool, priority_class; default team and gpu type)."""
        params = report_params(**query)
        return UsageReport.model_validate(self._request("GET", f"{wire.API}/usage", params=params))

    def costs(self, **query: Any) -> UsageReport:
        """The usage report priced in the server's currency (``currency``); as :meth:`usage`."""
        params = report_params(**query)
        return UsageReport.model_validate(self._request("GET", f"{wire.API}/costs", params=params))

    def usage_attempts(
        self, *, costs: bool = False, limit: int = 1000, cursor: str | None = None, **query: Any
    ) -> UsageAttemptPage:
        """One page of the per-attempt report (with costs when ``costs``)."""
        path, params = attempts_request(costs, limit, cursor, query)
        return UsageAttemptPage.model_validate(self._request("GET", path, params=params))

    def iter_usage_attempts(self, *, costs: bool = False, **query: Any) -> Iterator[UsageAttempt]:
        """Every attempt of the report, fetching pages lazily."""
        cursor: str | None = None
        while True:
            page = self.usage_attempts(costs=costs, cursor=cursor, **query)
            yield from page.items
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    def usage_csv(self, *, costs: bool = False, attempts: bool = False, **query: Any) -> str:
        """The report as the server writes it in CSV (``# missing`` lines, then a table)."""
        params = report_params(**query)
        if attempts:
            params.update(report="attempts", limit=10_000)
        path = f"{wire.API}/{'costs' if costs else 'usage'}"
        return self._send("GET", path, params=params, headers={"Accept": "text/csv"}).text

    # -- configuration (platform admins) -----------------------------------------------------

    def config(self) -> ConfigVersion:
        """The configuration version in force, with its YAML."""
        return ConfigVersion.model_validate(self._request("GET", f"{wire.API}/config"))

    def config_versions(self, limit: int = 50) -> list[ConfigVersion]:
        """Stored versions, newest first."""
        body = self._request("GET", f"{wire.API}/config/versions", params={"limit": limit})
        return [ConfigVersion.model_validate(item) for item in body.get("items", [])]

    def config_diff(self, yaml_text: str, source: str = "") -> ConfigDiff:
        """What ``yaml_text`` would change; ``base_version`` is what an apply must pass."""
        body = {"yaml": yaml_text, "source": source}
        return ConfigDiff.model_validate(
            self._request("POST", f"{wire.API}/config/diff", json=body)
        )

    def apply_config(
        self, yaml_text: str, base_version: int, *, source: str = "", force: bool = False
    ) -> ConfigApplied:
        """Store ``yaml_text`` as the next version. ``Conflict`` when ``base_version`` is no
        longer current or jobs use a removed team or pool (``force`` settles them);
        ``ConfigInvalid`` listing every problem of the file."""
        body = {"yaml": yaml_text, "base_version": base_version, "source": source, "force": force}
        return ConfigApplied.model_validate(self._request("POST", f"{wire.API}/config", json=body))

    # -- budgets ---------------------------------------------------------------------------

    def budgets(self, team: str | None = None) -> list[BudgetStatus]:
        """How budgets stand this period: one team's (its admins), else every team the caller
        administers (platform admins: all)."""
        params = {"team": team} if team else {}
        body = self._request("GET", f"{wire.API}/budgets", params=params)
        return [BudgetStatus.model_validate(item) for item in body.get("items", [])]

    def set_budget(self, team: str, name: str, **settings: Any) -> BudgetSet:
        """Add or replace ``team``'s budget ``name`` (platform admins): a new configuration
        version. ``settings``: period, start, end, gpu_hours or amount, gpu_type, thresholds,
        enforcement, base_version (``Conflict`` unless it is current)."""
        body = wire.drop_none(
            {k: str(v) if isinstance(v, date) else v for k, v in settings.items()}
        )
        path = f"{wire.API}/budgets/{quote(team, safe='')}/{quote(name, safe='')}"
        return BudgetSet.model_validate(self._request("PUT", path, json=body))

    def webhook_deliveries(
        self, *, webhook: str | None = None, limit: int = 50
    ) -> list[WebhookDelivery]:
        """The webhook delivery log, newest first (platform admins)."""
        params = wire.drop_none({"webhook": webhook, "limit": limit})
        body = self._request("GET", f"{wire.API}/webhooks/deliveries", params=params)
        return [WebhookDelivery.model_validate(item) for item in body.get("items", [])]

    # -- plumbing --------------------------------------------------------------------------

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        with map_transport_errors(self.url):
            response = self._http.request(method, path, **kwargs)
        raise_for_response(response)
        return response

    def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        return self._send(method, path, **kwargs).json()
