"""Schemathesis hooks for scripts/schemathesis.sh (loaded through SCHEMATHESIS_HOOKS).

1. outpost reads integers as JSON integers: `88.0` where an integer is expected is
   refused with 400 `bad_request` (docs/DEVIATIONS.md, "Integers are written as
   integers"). JSON Schema 2020-12 counts `88.0` as an integer and schemathesis draws
   such values on purpose, which no schema can rule out; they are written as `88`.
2. The gateway's node-facing routes (`/v1/nodes/{id}/...`) need a request signature
   (docs/PROTOCOL.md section 5). gateway.toml supplies the three headers with
   placeholders; when a request carries all three (schemathesis leaves one out to test
   that it is required), it is signed here with OUTPOST_ST_NODE_KEYS (that node's
   keys.json), over the exact bytes then sent, so fuzzed bodies reach the handlers.
3. A positive `wait_s` is capped at 1 s (pulls and gateway tool calls would otherwise
   hold requests for up to 60 s); an absent one on a gateway tool call becomes 1.
"""

import base64
import hashlib
import json
import os
import re
import struct
import time

import requests
import schemathesis
from schemathesis.core import NotSet

NODE_PREFIX = "/v1/nodes/{id}/"
NODE_ID = re.compile(r"^[a-z][a-z0-9-]{0,31}:[A-Za-z0-9._-]{1,64}$")
SIG_HEADERS = ("Outpost-Node", "Outpost-Timestamp", "Outpost-Signature")


def _whole_floats_as_ints(value):
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        return int(value)
    if isinstance(value, dict):
        return {k: _whole_floats_as_ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_whole_floats_as_ints(v) for v in value]
    return value


def _pae(*pieces):
    out = struct.pack("<Q", len(pieces))
    for p in pieces:
        out += struct.pack("<Q", len(p)) + p
    return out


_signer = None


def _signing_key():
    global _signer
    if _signer is None:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        with open(os.environ["OUTPOST_ST_NODE_KEYS"]) as f:
            seed_b64 = json.load(f)["sign_sk"]
        seed = base64.urlsafe_b64decode(seed_b64 + "=" * (-len(seed_b64) % 4))
        _signer = Ed25519PrivateKey.from_private_bytes(seed)
    return _signer


def _cap_wait(container, absent_default=None):
    """A copy of `container` with a positive `wait_s` capped at 1."""
    if not isinstance(container, dict):
        return container
    out = dict(container)
    w = out.get("wait_s")
    if isinstance(w, int) and not isinstance(w, bool) and w > 1:
        out["wait_s"] = 1
    elif "wait_s" not in out and absent_default is not None:
        out["wait_s"] = absent_default
    return out


def _sign(case, base_url):
    headers = dict(case.headers or {})
    if not all(h in headers for h in SIG_HEADERS):
        return
    node = headers["Outpost-Node"]
    # A valid node id in the path becomes the signer's; an invalid one stays (negative).
    if NODE_ID.match(str((case.path_parameters or {}).get("id", ""))):
        case.path_parameters = dict(case.path_parameters, id=node)
    body = b""
    if case.method.upper() != "GET" and not isinstance(case.body, NotSet):
        # Sent as these exact bytes, so the signature covers what goes on the wire.
        body = case.body if isinstance(case.body, bytes) else json.dumps(case.body).encode()
        case.body = body
    # The request target as requests will write it (the same library sends it).
    target = (
        requests.Request(case.method.upper(), base_url + case.formatted_path, params=case.query)
        .prepare()
        .path_url
    )
    ts = str(int(time.time() * 1000))
    msg = _pae(
        b"outpost/http/v1",
        node.encode(),
        case.method.upper().encode(),
        target.encode(),
        ts.encode(),
        hashlib.sha256(body).digest(),
    )
    sig = base64.urlsafe_b64encode(_signing_key().sign(msg)).rstrip(b"=").decode()
    headers.update({"Outpost-Timestamp": ts, "Outpost-Signature": sig})
    case.headers = headers


@schemathesis.hook
def before_call(context, case, **kwargs):
    if isinstance(case.body, (dict, list, float)):
        case.body = _whole_floats_as_ints(case.body)
    if case.path == "/v1/tool_call" and os.environ.get("OUTPOST_ST_ROLE") == "gateway":
        case.body = _cap_wait(case.body, absent_default=1)
    if case.path.startswith(NODE_PREFIX) and os.environ.get("OUTPOST_ST_NODE_KEYS"):
        case.query = _cap_wait(case.query)
        _sign(case, os.environ["OUTPOST_ST_BASE_URL"])
