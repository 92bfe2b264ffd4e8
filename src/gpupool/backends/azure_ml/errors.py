"""Azure ML's errors, translated as the Batch adapter's are (the same azure-core exception
classes: see :mod:`gpupool.backends.azure_batch.errors`), plus the SDK's own validation
errors (``ValidationException``, ``UserErrorException``: the job as built was refused before
any request, so the attempt's fault). A log download's ``requests`` errors are ``OSError``s:
unavailable, their URL's query (a SAS) cut from the message."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from gpupool.backends.azure_batch.errors import map_azure_errors, summary
from gpupool.backends.errors import BackendError, BackendRejected

_SDK_REFUSALS = frozenset({"ValidationException", "UserErrorException", "JobException"})


@contextmanager
def map_azure_ml_errors(
    action: str, *, invalid: type[BackendError] = BackendRejected
) -> Iterator[None]:
    try:
        yield
    except BackendError:
        raise
    except Exception as exc:
        # The SDK's own refusals first: they are AzureErrors too, which would read "retry".
        if {cls.__name__ for cls in type(exc).__mro__} & _SDK_REFUSALS:
            raise invalid(f"azure-ml backend cannot {action}: {summary(exc)}") from exc
        with map_azure_errors("azure-ml", action, invalid=invalid):
            raise
