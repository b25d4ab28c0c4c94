"""Kubernetes lists read a page at a time (:func:`gameday.kube.pages.paged`).

Stand-in: the Kubernetes API (gameday/testing/kube.py, real HTTP), read through the REAL
``kubernetes`` client, whose ``limit`` and ``_continue`` arguments and
``metadata._continue`` the pages go through.
"""

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gameday.kube.pages import paged
from gameday.testing.kube import KubeStandin, running_standin


@pytest.fixture(scope="module")
def standin() -> Iterator[tuple[KubeStandin, Any]]:
    with running_standin() as api:
        config = client.Configuration()
        config.host = api.url
        config.api_key = {"authorization": f"Bearer {api.token}"}
        yield api, client.CoreV1Api(client.ApiClient(config))


def names(objects: list[Any]) -> list[tuple[str, str]]:
    return [(o.metadata.namespace or "", o.metadata.name) for o in objects]


@settings(max_examples=25, deadline=None)
@given(nodes=st.sets(st.from_regex(r"[a-z][a-z0-9-]{0,12}", fullmatch=True), max_size=40),
       pods=st.sets(st.tuples(st.sampled_from(["a", "gameday", "z-ns"]),
                              st.from_regex(r"[a-z][a-z0-9-]{0,12}", fullmatch=True),
                              st.booleans()), max_size=40),
       page=st.integers(1, 45))
def test_every_object_comes_once_in_key_order_whatever_the_page_size(
        standin: tuple[KubeStandin, Any], nodes: set[str],
        pods: set[tuple[str, str, bool]], page: int) -> None:
    """Nodes and pods (all, one namespace's, a label's) listed a page of ``page`` at a
    time are what one whole list gives: each object once, in key order."""
    api, core = standin
    with api.lock:
        api.nodes.clear()
        api.pods.clear()
    for node in nodes:
        api.add_node(node)
    for namespace, name, labelled in pods:
        api.add_pod(namespace, name, "n", labels={"role": "agent"} if labelled else {})
    lists: list[tuple[Any, tuple[Any, ...], dict[str, Any]]] = [
        (core.list_node, (), {}),
        (core.list_pod_for_all_namespaces, (), {}),
        (core.list_pod_for_all_namespaces, (), {"label_selector": "role=agent"}),
        (core.list_namespaced_pod, ("gameday",), {}),
        (core.list_namespaced_pod, ("gameday",), {"label_selector": "role=agent"}),
    ]
    for call, args, kwargs in lists:
        whole = names(call(*args, **kwargs).items)
        assert whole == sorted(whole)
        assert names(list(paged(call, *args, page_size=page, **kwargs))) == whole


@pytest.mark.parametrize("token", ["not-base64!", "eyJzdGFydCI6IDF9", "e30="])
def test_a_continue_token_the_server_did_not_give_is_refused(
        standin: tuple[KubeStandin, Any], token: str) -> None:
    """A malformed or foreign continue token is a 400 from the API (as the real server
    answers), which the caller's error handling sees, not a list restarted silently."""
    _, core = standin
    with pytest.raises(ApiException) as refused:
        core.list_node(limit=1, _continue=token)
    assert refused.value.status == 400
