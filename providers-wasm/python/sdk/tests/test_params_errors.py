import pytest
from capstan_provider import errors
from capstan_provider.params import Fields, parse
from componentize_py_types import Err
from capstan_provider.types import ProviderError_CreateFailed, ProviderError_Invalid


def invalid_message(fn):
    with pytest.raises(Err) as e:
        fn()
    assert isinstance(e.value.value, ProviderError_Invalid), e.value.value
    return e.value.value.value


def test_parse_accepts_empty_and_objects_only():
    assert parse("") == {}
    assert parse(" {\"a\": 1} ") == {"a": 1}
    assert invalid_message(lambda: parse("[1]")) == "parameters: must be a JSON object"
    assert invalid_message(lambda: parse("{")).startswith("parameters: not JSON")


def test_fields_name_the_offending_field():
    f = Fields({"items": [{"price": "x"}]})
    (item,) = f.objects("items")
    assert invalid_message(lambda: item.float("price")) == 'parameters.items[0].price: expected a number, got "x"'
    f = Fields({"maxCpu": -1})
    assert invalid_message(lambda: f.int("maxCpu", minimum=0)) == "parameters.maxCpu: must not be negative, got -1"
    f = Fields({"zones": ["a", " "]})
    assert invalid_message(lambda: f.str_list("zones")) == "parameters.zones[1]: must not be empty"


def test_unknown_fields_are_rejected():
    f = Fields({"zones": [], "zone": "typo"})
    f.str_list("zones")
    assert invalid_message(f.done) == "parameters.zone: unknown field"


def test_error_helpers():
    e = errors.create_failed("NodeNameTaken", "taken")
    assert isinstance(e.value, ProviderError_CreateFailed)
    assert errors.kind(e.value) == "create-failed"
    assert errors.message(e.value) == "NodeNameTaken: taken"
    assert errors.message(errors.not_implemented("create").value) == "not implemented: create"
