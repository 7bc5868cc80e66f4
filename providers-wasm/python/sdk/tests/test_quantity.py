import pytest
from capstan_provider.quantity import Quantity, QuantityError, parse_millis, parse_units


@pytest.mark.parametrize(
    "text,millis",
    [
        ("500m", 500),
        ("2", 2000),
        ("1Ki", 1_024_000),
        ("16Gi", 16 * 2**30 * 1000),
        ("1.5", 1500),
        ("2e3", 2_000_000),
        ("1E-3", 1),
        ("100n", 1),  # finer than a milli-unit rounds up
        ("-1", -1000),
        ("+.5", 500),
        ("5.", 5000),
        ("0.0001", 1),
        ("0", 0),
        ("1k", 1_000_000),
    ],
)
def test_parses_to_exact_millis(text, millis):
    assert Quantity.parse(text).millis == millis


@pytest.mark.parametrize("text", ["", "abc", "1.2.3", "1Zi", "--1", "1e", "1e+", ".", "1 Gi", "١"])
def test_rejects_bad_syntax(text):
    with pytest.raises(QuantityError):
        Quantity.parse(text)


def test_rejects_values_out_of_range():
    with pytest.raises(QuantityError, match="out of range"):
        Quantity.parse("1e40")


@pytest.mark.parametrize(
    "text,canonical",
    [("1.5", "1500m"), ("2000", "2k"), ("1024Mi", "1Gi"), ("1536Mi", "1536Mi"), ("1e3", "1e3"), ("0.5Ki", "512"), ("0", "0"), ("100m", "100m")],
)
def test_formats_canonically(text, canonical):
    assert str(Quantity.parse(text)) == canonical


def test_value_rounds_up_away_from_zero():
    assert Quantity.parse("1.5").value() == 2
    assert Quantity.parse("-1.5").value() == -2
    assert parse_units("16Gi") == 17179869184
    assert parse_millis("100m") == 100


def test_constructors_and_order():
    assert str(Quantity.from_bytes(1 << 30)) == "1Gi"
    assert str(Quantity.from_units(4)) == "4"
    assert Quantity.parse("1Gi") > Quantity.parse("1G")
    assert Quantity.parse("1000m") == Quantity.parse("1")
    assert Quantity.parse("-5").milli_value() == 0


def test_round_trips_through_its_canonical_form():
    for text in ["3", "250m", "7Gi", "1.25Mi", "12e6", "999k", "1001m"]:
        q = Quantity.parse(text)
        assert Quantity.parse(str(q)) == q
