"""``list_items`` pages under contract 0.3 (the bindings here are 0.1's, so the test stands in a
0.3 ``ListOptions`` and a fake ``list`` import that serves pages as the API server would)."""

import json
from dataclasses import dataclass

import pytest
from capstan_provider import kube
from componentize_py_types import Err
from wit_world.imports.kube import KubeError_Conflict


@dataclass
class ListOptions03:
    label_selector: str | None
    field_selector: str | None
    limit: int | None
    continue_token: str | None


def serve(objects, calls):
    """A fake ``kube.list``: pages of ``options.limit`` items, the continue token an offset."""

    def list_(target, options):
        calls.append(options)
        start = int(options.continue_token or 0)
        end = len(objects) if options.limit is None else start + options.limit
        page = {"kind": "NodeList", "metadata": {}, "items": objects[start:end]}
        if end < len(objects):
            page["metadata"]["continue"] = str(end)
        return json.dumps(page)

    return list_


@pytest.fixture
def paged(monkeypatch):
    monkeypatch.setattr(kube, "_PAGED", True)
    monkeypatch.setattr(kube, "ListOptions", ListOptions03)
    monkeypatch.setattr(kube, "PAGE_SIZE", 3)
    return monkeypatch


def test_list_items_reads_every_page(paged):
    objects = [{"metadata": {"name": f"n{i}"}} for i in range(8)]
    calls = []
    paged.setattr(kube._kube, "list", serve(objects, calls))
    items = kube.list_items(kube.Target.workload("v1", "Node"), label_selector="a=b")
    assert [o["metadata"]["name"] for o in items] == [f"n{i}" for i in range(8)]
    assert [(c.limit, c.continue_token, c.label_selector) for c in calls] == [
        (3, None, "a=b"),
        (3, "3", "a=b"),
        (3, "6", "a=b"),
    ]


def test_a_limit_given_is_one_page(paged):
    objects = [{"metadata": {"name": f"n{i}"}} for i in range(8)]
    calls = []
    paged.setattr(kube._kube, "list", serve(objects, calls))
    items = kube.list_items(kube.Target.workload("v1", "Node"), limit=2)
    assert len(items) == 2 and len(calls) == 1


def test_an_expired_token_is_a_conflict(paged):
    def list_(target, options):
        if options.continue_token:
            raise Err(KubeError_Conflict("the continue token expired"))
        return json.dumps({"metadata": {"continue": "x"}, "items": [{}]})

    paged.setattr(kube._kube, "list", list_)
    with pytest.raises(kube.KubeCallError) as failure:
        kube.list_items(kube.Target.workload("v1", "Node"))
    assert failure.value.kind == "conflict"
