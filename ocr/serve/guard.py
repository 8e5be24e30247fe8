"""What the web app lets in: requests to its own address from its own page, and the models it was started
with or that lie under its ``model_dirs``.

Any page the user opens can POST to a local server and, through DNS rebinding, read the answers. So every
request must name the served address in ``Host``, a browser's ``Origin`` must be the app's own, and a POST
must carry the page's token. A path to load is resolved (symlinks included) before anything is read.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import reprlib
import secrets
import socket
from collections.abc import Iterable, Mapping, Sequence

from ocr.utils.errors import ConfigValueError, UsageError

__all__ = ["TOKEN_HEADER", "ModelFiles", "RequestError", "RequestGuard", "is_loopback"]

TOKEN_HEADER = "X-Serve-Token"
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
_SHOWN = reprlib.Repr()  # a value quoted in a refusal: whole unless it is long
_SHOWN.maxstring = _SHOWN.maxother = 300


class RequestError(UsageError, ValueError):
    """A request the API refuses (answered 400 with the message, which names the field)."""


def is_loopback(address: str) -> bool:
    """Whether the IP address ``address`` reaches this machine only."""
    return ipaddress.ip_address(address).is_loopback


class RequestGuard:
    """The checks every request passes before the API sees it, for a socket bound to ``address:port``."""

    def __init__(self, address: str, port: int) -> None:
        self.port = port
        self.token = secrets.token_urlsafe(24)
        self._every_interface = ipaddress.ip_address(address).is_unspecified
        names = {address.lower()}
        if self._every_interface or is_loopback(address):
            names |= LOOPBACK_NAMES
        if not is_loopback(address):
            names |= {socket.gethostname().lower(), socket.getfqdn().lower()}
        self._names = frozenset(names)

    def refusal(self, method: str, headers: Mapping[str, str]) -> tuple[int, str] | None:
        """(HTTP status, message) refusing a request with these headers, or None to let it in."""
        host = headers.get("host", "")
        if not self._serves(host):
            return 400, (
                f"Host: expected this server's own address (port {self.port}), got {_SHOWN.repr(host)}: "
                "open the address the app printed"
            )
        origin = headers.get("origin")
        if origin is not None and origin.lower() != f"http://{host.lower()}":
            return 403, f"Origin: expected http://{host} (the app's own page), got {_SHOWN.repr(origin)}"
        if headers.get("sec-fetch-site") == "cross-site":
            return 403, "Sec-Fetch-Site: a request from another site's page is refused"
        if method not in ("GET", "HEAD") and not hmac.compare_digest(
            headers.get(TOKEN_HEADER.lower(), ""), self.token
        ):
            return 403, f"{TOKEN_HEADER}: expected the token of the page this server serves (reload the page)"
        return None

    def _serves(self, host: str) -> bool:
        name, _, port = (host, "", "80") if host.endswith("]") or ":" not in host else host.rpartition(":")
        if not name or not port.isdigit() or int(port) != self.port:
            return False
        name = name.removeprefix("[").removesuffix("]").lower()
        if name in self._names:
            return True
        # A DNS rebinding attack needs a name: an address literal names this machine itself.
        try:
            ipaddress.ip_address(name)
        except ValueError:
            return False
        return self._every_interface


class ModelFiles:
    """The files ``POST /api/model`` may load: the started models and any file under ``model_dirs``."""

    def __init__(self, started: Iterable[str], folders: Sequence[str]) -> None:
        self.files = frozenset(os.path.realpath(path) for path in started)
        for i, folder in enumerate(folders):
            if not os.path.isdir(folder):
                raise ConfigValueError(
                    f"model_dirs[{i}]={folder}: expected a folder whose models the page may load, got "
                    f"{'a file' if os.path.exists(folder) else 'no such folder'}"
                )
        self.folders = tuple(os.path.realpath(folder) for folder in folders)

    def resolve(self, requested: str) -> str:
        """The real path of ``requested`` when the app may load it (the refusal reads nothing, and is the
        same whether the file exists or not)."""
        if "\0" in requested:
            raise RequestError("path: expected a file path, got one with a NUL character")
        resolved = os.path.realpath(requested)
        if resolved in self.files or any(os.path.commonpath((resolved, f)) == f for f in self.folders):
            return resolved
        folders = ", ".join(self.folders) or "none"
        raise RequestError(
            f"path: {_SHOWN.repr(requested)} is neither a model the app was started with nor under its "
            f"model_dirs ({folders}), so it was not read; restart the app with model_dirs=[<folder>] to "
            "load the models of a folder"
        )
