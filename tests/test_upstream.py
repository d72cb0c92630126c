"""The upstream HTTP client against a local server: real requests calls, retries, timeouts, errors, checksums.

Every test keeps the backoff at 0 and timeouts short: the whole file runs in about a second.
"""

from __future__ import annotations

import base64
import hashlib
import threading

import pytest
from fakeupstream import FakeUpstream, Reply, closed_port_url
from rocmlock.errors import OperationError
from rocmlock.upstream.client import ChecksumMismatch, Client, Hosts, HttpOptions, NotFound, Unreachable
from rocmlock.upstream.outdated import newest_release

FAST = HttpOptions(timeout=0.3, retries=2, backoff=0.0)


def client_for(fake: FakeUpstream, options: HttpOptions = FAST) -> Client:
    return Client(
        Hosts(
            index_url=f"{fake.url}/pypi",
            github=fake.url,
            github_api=f"{fake.url}/api",
            github_raw=f"{fake.url}/raw",
        ),
        options,
    )


def test_project_reads_releases_and_sdist_digests(fake: FakeUpstream) -> None:
    data = b"sdist bytes"
    fake.add_project(
        "flash-attn",
        {
            "2.8.3": [fake.file("flash_attn-2.8.3.tar.gz", data)],
            "2.8.4": [fake.file("flash_attn-2.8.4-py3-none-any.whl", b"w", packagetype="bdist_wheel")],
            "2.9.0": [fake.file("flash_attn-2.9.0.tar.gz", b"y", yanked=True)],
            "3.0.0rc1": [fake.file("flash_attn-3.0.0rc1.tar.gz", b"z")],
        },
    )
    project = client_for(fake).project("flash-attn")
    sdist = project.sdist("2.8.3")
    assert sdist is not None and sdist.sha256 == hashlib.sha256(data).hexdigest()
    assert project.sdist("2.8.4") is None  # a wheel only
    assert project.sdist("2.9.0") is None  # yanked
    # Newest: final releases only, yanked ones not counted.
    assert newest_release(project) == "2.8.4"


def test_a_500_then_success_is_retried(fake: FakeUpstream) -> None:
    fake.add(
        "/pypi/deepspeed/json",
        Reply(500, b"oops"),
        Reply(body=b'{"info": {"version": "0.18.4"}, "releases": {"0.18.4": []}}'),
    )
    project = client_for(fake).project("deepspeed")
    assert project.latest == "0.18.4"
    assert fake.hits["/pypi/deepspeed/json"] == 2


def test_persistent_500_fails_after_the_retries(fake: FakeUpstream) -> None:
    fake.add("/pypi/deepspeed/json", Reply(503, b"down"))
    with pytest.raises(OperationError, match=r"deepspeed/json: HTTP 503 after 2 retries"):
        client_for(fake).project("deepspeed")
    assert fake.hits["/pypi/deepspeed/json"] == 3  # the first try and two retries


def test_a_404_is_not_found_and_not_retried(fake: FakeUpstream) -> None:
    with pytest.raises(NotFound, match=r"/pypi/no-such-thing/json: not found \(HTTP 404\)"):
        client_for(fake).project("no-such-thing")
    assert fake.hits["/pypi/no-such-thing/json"] == 1


def test_a_slow_server_times_out(fake: FakeUpstream) -> None:
    """The server answers only after the client has given up (it holds every reply until the test lets go), so
    "timed out" can only come from the client's own timeout, each of its two tries, whatever the machine's speed."""
    answer = threading.Event()
    fake.add("/pypi/torch/json", Reply(body=b"{}", hold=answer))
    try:
        with pytest.raises(Unreachable, match="timed out"):
            client_for(fake, HttpOptions(timeout=0.2, retries=1, backoff=0.0)).project("torch")
        assert not answer.is_set() and fake.hits["/pypi/torch/json"] == 2
    finally:
        answer.set()


def test_connection_refused_is_unreachable() -> None:
    client = Client(
        Hosts(index_url=f"{closed_port_url()}/pypi"), HttpOptions(timeout=0.5, retries=1, backoff=0.0)
    )
    with pytest.raises(Unreachable, match="connection failed"):
        client.project("torch")
    assert not client.reachable(f"{closed_port_url()}/x.tar.gz")


def test_download_checks_the_sha256(fake: FakeUpstream) -> None:
    fake.add("/files/a.tar.gz", Reply(body=b"real bytes"))
    client = client_for(fake)
    good = hashlib.sha256(b"real bytes").hexdigest()
    assert client.download(f"{fake.url}/files/a.tar.gz", good) == b"real bytes"
    with pytest.raises(ChecksumMismatch, match=f"sha256 {good}, expected {'0' * 64}"):
        client.download(f"{fake.url}/files/a.tar.gz", "0" * 64)
    assert client.sha256_of(f"{fake.url}/files/a.tar.gz") == good


def test_github_commit_of_a_tag_asks_for_the_sha_media_type(fake: FakeUpstream) -> None:
    rev = "ab" * 20
    fake.add("/api/repos/owner/repo/commits/v1.0", Reply(body=rev.encode() + b"\n"))
    assert client_for(fake).github_commit("owner/repo", "v1.0") == rev


def test_credentials_in_the_index_url_never_reach_a_message(fake: FakeUpstream) -> None:
    host = fake.url.removeprefix("http://")
    client = Client(Hosts(index_url=f"http://bob:s3cret@{host}/pypi"), FAST)
    with pytest.raises(NotFound) as err:
        client.project("torch")
    assert "s3cret" not in str(err.value) and "bob" not in str(err.value)


def test_proxy_and_ca_bundle_come_from_the_environment(
    fake: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The fake server plays an HTTP proxy: it gets the absolute URL of a host that does not exist.
    # The machine's own proxy variables go first: requests reads the lowercase ones before HTTP_PROXY.
    for name in ("NO_PROXY", "no_proxy", "http_proxy", "https_proxy", "all_proxy", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", fake.url)
    fake.add_json("http://pypi.invalid/pypi/torch/json", {"info": {"version": "2.15.0"}, "releases": {}})
    client = Client(Hosts(index_url="http://pypi.invalid/pypi"), FAST)
    assert client.project("torch").latest == "2.15.0"
    monkeypatch.setenv("PIP_CERT", "/etc/ssl/certs/custom-ca.pem")
    assert Client(Hosts(), FAST).session.verify == "/etc/ssl/certs/custom-ca.pem"


def test_index_credentials_go_to_the_index_host_only(fake: FakeUpstream) -> None:
    token = "Basic " + base64.b64encode(b"bob:s3cret").decode()
    host = fake.url.removeprefix("http://")
    fake.add(
        "/pypi/torch/json", Reply(body=b'{"info": {"version": "1"}, "releases": {}}', authorization=token)
    )
    fake.add("/files/torch-1.tar.gz", Reply(body=b"sdist", authorization=token))
    client = Client(
        Hosts(
            index_url=f"http://bob:s3cret@{host}/pypi",
            github_api=f"http://localhost:{fake.url.rsplit(':', 1)[1]}/api",
        ),
        FAST,
    )
    assert client.project("torch").latest == "1"
    # A file on the index's host (a mirror's sdist URL carries no credentials) gets them too, like pip does.
    assert client.download(f"{fake.url}/files/torch-1.tar.gz") == b"sdist"
    # Another host never sees them (localhost is another host name for the same server here).
    fake.add("/api/repos/o/r/commits/v1", Reply(body=b"c" * 40))
    assert client.github_commit("o/r", "v1") == "c" * 40
    assert fake.seen_auth["/api/repos/o/r/commits/v1"] is None


def test_relative_file_urls_resolve_against_the_json_document(fake: FakeUpstream) -> None:
    fake.add_json(
        "/mirror/pypi/torch/json",
        {
            "info": {"version": "1"},
            "releases": {
                "1": [
                    {
                        "filename": "torch-1.tar.gz",
                        "url": "../../files/t.tar.gz",
                        "packagetype": "sdist",
                        "digests": {"sha256": "0" * 64},
                    }
                ]
            },
        },
    )
    fake.add("/mirror/files/t.tar.gz", Reply(body=b"t"))
    client = Client(Hosts(index_url=f"{fake.url}/mirror/pypi"), FAST)
    sdist = client.project("torch").sdist("1")
    assert sdist is not None and sdist.url == f"{fake.url}/mirror/files/t.tar.gz"
    assert client.download(sdist.url) == b"t"


def test_json_nested_past_the_interpreters_limit_is_a_bad_answer_not_a_traceback(fake: FakeUpstream) -> None:
    """requests' .json() and json.loads raise RecursionError, not ValueError, for a 100,000-deep array: `outdated`
    and `bump` ended in a traceback (and the ROCm line, which "never raises", raised)."""
    deep = b"[" * 100_000 + b"]" * 100_000
    fake.add("/pypi/flash-attn/json", Reply(body=deep))
    fake.add("/api/repos/ROCm/TheRock/tags", Reply(body=deep))
    client = client_for(fake)
    with pytest.raises(OperationError, match="not a PyPI JSON API answer"):
        client.project("flash-attn")
    with pytest.raises(OperationError, match="not a list of tags"):
        client.github_tags("ROCm/TheRock")


@pytest.mark.parametrize(("url", "says"), [
    ("http://[::1", "not a URL (Invalid IPv6 URL)"), ("http://h:abc/pypi", "not a URL"),
    ("ftp://mirror.example/pypi", "not an http(s) URL"), ("pypi.org/pypi", "not an http(s) URL"),
])
def test_a_root_url_that_is_no_http_url_is_one_line(url: str, says: str) -> None:
    # `--index-url 'http://[::1'` was a ValueError traceback; `ftp://...` was taken, and every row then failed.
    from rocmlock.errors import InputError
    from rocmlock.upstream.client import check_root_url

    with pytest.raises(InputError) as caught:
        check_root_url(url, "--index-url")
    assert str(caught.value) == f"--index-url: {says}" or str(caught.value).startswith(f"--index-url: {says}")
    assert caught.value.hint
