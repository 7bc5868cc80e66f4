import pytest
from capstan_provider.requirements import (
    RequirementError,
    Requirements,
    ValueSet,
    does_not_exist,
    exists,
    gt,
    in_,
    labels_satisfy,
    lt,
    not_in,
)
from capstan_provider.types import Operator, Requirement


def reqs(*rs):
    return Requirements.of(rs)


def test_in_sets_intersect_on_overlap_only():
    assert reqs(in_("zone", ["a", "b"])).intersects(reqs(in_("zone", ["b", "c"]))) is None
    assert "zone" in reqs(in_("zone", ["a"])).intersects(reqs(in_("zone", ["c"])))


def test_not_in_and_does_not_exist_both_allow_absence():
    assert reqs(not_in("zone", ["a"])).intersects(reqs(does_not_exist("zone"))) is None
    assert reqs(in_("zone", ["a"])).intersects(reqs(not_in("zone", ["a"]))) is not None
    assert reqs(in_("zone", ["a"])).intersects(reqs(does_not_exist("zone"))) is not None


def test_bounds():
    assert reqs(in_("cpu", ["4"])).intersects(reqs(gt("cpu", 2), lt("cpu", 8))) is None
    assert reqs(in_("cpu", ["2"])).intersects(reqs(gt("cpu", 2))) is not None
    assert reqs(in_("cpu", ["x"])).intersects(reqs(gt("cpu", 2))) is not None
    # Gt 2 and Lt 3 leave nothing.
    assert reqs(exists("cpu")).intersects(reqs(gt("cpu", 2), lt("cpu", 3))) is not None


def test_keys_only_one_side_constrains_do_not_conflict():
    assert reqs(in_("a", ["1"])).intersects(reqs(in_("b", ["2"]))) is None


def test_same_key_requirements_narrow():
    r = reqs(in_("zone", ["a", "b", "c"]), not_in("zone", ["b"]))
    assert r.sets["zone"] == ValueSet(False, frozenset({"a", "c"}))


def test_malformed_bounds_are_errors():
    with pytest.raises(RequirementError):
        Requirements.of([Requirement("cpu", Operator.GT, ["x"], None)])
    with pytest.raises(RequirementError):
        Requirements.of([Requirement("cpu", Operator.LT, [], None)])


def test_labels_satisfy():
    labels = {"zone": "a", "cpu": "4"}
    assert labels_satisfy(labels, [in_("zone", ["a"]), gt("cpu", 3), does_not_exist("gpu")])
    assert not labels_satisfy(labels, [exists("gpu")])
    assert not labels_satisfy(labels, [not_in("zone", ["a"])])
