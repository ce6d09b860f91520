"""Each setting is declared once (realtime/settings.py): its variable, reading, bounds, default
and doc. What every declaration promises holds for all of them, whatever the value drawn: a
value outside the bounds is refused naming the variable, one inside is read, the default is
within the bounds and is what an unset variable gives."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from realtime.environment import Choices, Number, Whole
from realtime.settings import DECLARED, Declared, Settings, SettingsError

BOUNDED = [d for d in DECLARED if isinstance(d.setting.reading, Whole | Number)]
# fields an unset variable leaves to the rules that tie settings together: a development
# secret is made up when no key is configured
DERIVED_WHEN_UNSET = {"auth_hs256_secret"}


def declared_id(declared: Declared) -> str:
    return declared.setting.env


def only_problem(environ: dict[str, str]) -> str:
    with pytest.raises(SettingsError) as caught:
        Settings.from_env(environ)
    (problem,) = caught.value.problems
    return problem


def outside(declared: Declared, *, below: bool) -> st.SearchStrategy[str]:
    """Raw values just past one of the declaration's bounds, or far past it."""
    reading = declared.setting.reading
    if isinstance(reading, Whole):
        if below:
            return st.integers(max_value=reading.low - 1).map(str)
        return st.integers(min_value=reading.high + 1).map(str)
    assert isinstance(reading, Number)
    finite: dict[str, Any] = {"allow_nan": False, "allow_infinity": False}
    if below:
        return st.floats(max_value=reading.low, exclude_max=True, **finite).map(repr)
    return st.floats(min_value=reading.high, exclude_min=True, **finite).map(repr)


def inside(declared: Declared) -> st.SearchStrategy[str]:
    reading = declared.setting.reading
    if isinstance(reading, Whole):
        return st.integers(reading.low, reading.high).map(str)
    assert isinstance(reading, Number)
    return st.floats(reading.low, reading.high).map(repr)


def test_every_number_read_from_the_environment_is_bounded() -> None:
    # the property tests below are only as good as the declarations they draw from
    defaults = Settings()
    numbers = {
        name for name in Settings.__struct_fields__ if type(getattr(defaults, name)) in (int, float)
    }
    assert numbers - {d.field for d in BOUNDED} == {"max_body_bytes"}  # set in code only


@given(data=st.data(), declared=st.sampled_from(BOUNDED), below=st.booleans())
def test_a_value_outside_the_bounds_is_refused_naming_the_variable(
    data: st.DataObject, declared: Declared, below: bool
) -> None:
    raw = data.draw(outside(declared, below=below))
    problem = only_problem({declared.setting.env: raw})

    assert problem.startswith(f"{declared.setting.env} must be between ")
    assert problem.endswith(f", not {raw}")


@given(data=st.data(), declared=st.sampled_from(BOUNDED))
def test_a_value_inside_the_bounds_is_read(data: st.DataObject, declared: Declared) -> None:
    raw = data.draw(inside(declared))
    settings = Settings.from_env({declared.setting.env: raw})

    assert getattr(settings, declared.field) == type(declared.default)(raw)


@pytest.mark.parametrize("declared", BOUNDED, ids=declared_id)
def test_a_default_is_within_its_bounds(declared: Declared) -> None:
    reading = declared.setting.reading
    assert isinstance(reading, Whole | Number)
    assert reading.low <= declared.default <= reading.high
    assert isinstance(declared.default, int if isinstance(reading, Whole) else float)


@pytest.mark.parametrize(
    "declared", [d for d in DECLARED if isinstance(d.setting.reading, Choices)], ids=declared_id
)
def test_a_list_of_choices_defaults_to_all_of_them(declared: Declared) -> None:
    reading = declared.setting.reading
    assert isinstance(reading, Choices)
    assert declared.default == frozenset(reading.known)


@pytest.mark.parametrize(
    "declared", [d for d in DECLARED if d.field not in DERIVED_WHEN_UNSET], ids=declared_id
)
def test_an_unset_variable_gives_the_declared_default(declared: Declared) -> None:
    assert getattr(Settings.from_env({}), declared.field) == declared.default
    assert getattr(Settings(), declared.field) == declared.default


def test_each_variable_is_declared_once_and_every_declaration_has_its_doc() -> None:
    names = [d.setting.env for d in DECLARED]
    assert len(names) == len(set(names))
    assert all(name.startswith("AIM_") for name in names)
    for declared in DECLARED:
        doc = declared.setting.doc
        assert doc.strip() == doc
        assert doc
        assert "\n" not in doc
