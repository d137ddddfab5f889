"""Formats: the standard facts, properties derived from the definitions, identity
(immutability, hash/eq, pickle, repr), lookup by name/alias/dtype, finfo against
numpy and ml_dtypes."""

from __future__ import annotations

import math
import pickle

import ml_dtypes
import numpy as np
import pytest

import lowp
from _reference import FloatSpec, round_float

FLOAT_NAMES = ["bfloat16", "float16", "float32", "float64", "float8_e5m2", "float8_e4m3fn", "float8_e4m3",
               "float8_e4m3fnuz", "float8_e5m2fnuz"]
ML_FLOAT_NAMES = ["bfloat16", "float8_e5m2", "float8_e4m3fn", "float8_e4m3", "float8_e4m3fnuz", "float8_e5m2fnuz",
                  "float8_e3m4", "float8_e4m3b11fnuz", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn"]
POSIT_NAMES = {"posit8": 8, "posit16": 16, "posit32": 32}

CUSTOM_FLOATS = [
    lowp.FloatFormat(4, 3, bias=11),
    lowp.FloatFormat(6, 9),
    lowp.FloatFormat(3, 2, nan=None),
    lowp.FloatFormat(3, 2, nan=None, subnormals=False),
    lowp.FloatFormat(5, 2, subnormals=False),
    lowp.FloatFormat(4, 3, nan="fn", subnormals=False),
    lowp.FloatFormat(5, 4, inf=False),
    lowp.FloatFormat(2, 1),
    lowp.FloatFormat(4, 0, nan="fn"),
    lowp.FloatFormat(3, 4, nan="fnuz", bias=5),
    lowp.FloatFormat(8, 7, bias=100),
    lowp.FloatFormat(11, 20),
]


def test_standard_maxima():
    assert lowp.format("float16").max == 65504.0
    assert lowp.format("e5m2").max == 57344.0
    assert lowp.format("e4m3").max == 240.0
    assert lowp.format("e4m3fn").max == 448.0
    assert lowp.format("e4m3fnuz").max == 240.0
    assert lowp.format("e5m2fnuz").max == 57344.0
    assert lowp.FloatFormat(4, 3, bias=11).max == 15.0  # IBM HFP8 forward format
    assert lowp.format("bf16").max == float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)
    assert lowp.format("posit8").max == 2.0**24
    assert lowp.format("posit16").max == 2.0**56
    assert lowp.format("posit32").max == 2.0**120
    assert lowp.format("int8").max == 127 and lowp.format("int8").min == -128


@pytest.mark.parametrize("fmt", [lowp.format(n) for n in FLOAT_NAMES] + CUSTOM_FLOATS, ids=repr)
def test_float_properties_from_definition(fmt):
    s = FloatSpec.of(fmt)
    assert fmt.bits == 1 + fmt.exp_bits + fmt.man_bits
    assert fmt.max == float(s.max)
    assert fmt.emin == 1 - fmt.bias
    assert fmt.min_normal == 2.0**fmt.emin
    expect_sub = 2.0 ** (fmt.emin - fmt.man_bits) if fmt.subnormals and fmt.man_bits else 2.0**fmt.emin
    assert fmt.min_subnormal == expect_sub
    assert fmt.eps == 2.0**-fmt.man_bits
    assert fmt.precision == fmt.man_bits + 1
    assert fmt.emax == math.frexp(fmt.max)[1] - 1
    assert fmt.storage_dtype.itemsize * 8 >= fmt.bits
    assert fmt.storage_dtype.itemsize * 8 < 2 * fmt.bits or fmt.bits <= 8


def test_custom_float_facts():
    f = lowp.FloatFormat(6, 9)
    assert f.bias == 31 and f.max == (2 - 2.0**-9) * 2.0**31 and f.min_subnormal == 2.0**-39
    f = lowp.FloatFormat(3, 2, nan=None)
    assert f.bias == 3 and f.max == 28.0 and f.nan is None and not f.inf
    f = lowp.FloatFormat(3, 2, nan=None, subnormals=False)
    assert f.min_subnormal == f.min_normal == 0.25
    assert lowp.FloatFormat(4, 3, nan="fnuz").bias == 8
    assert lowp.FloatFormat(5, 2, nan="fnuz").bias == 16
    assert lowp.FloatFormat(5, 4, inf=False).max == lowp.FloatFormat(5, 4).max
    # inf only applies to the ieee policy
    assert lowp.FloatFormat(4, 3, nan="fn", inf=True) == lowp.format("e4m3fn")


@pytest.mark.parametrize("name,n", POSIT_NAMES.items())
def test_posit_properties(name, n):
    f = lowp.format(name)
    assert isinstance(f, lowp.PositFormat) and f.nbits == n and f.es == 2 and f.bits == n
    useed_log = 4
    assert f.max == 2.0 ** ((n - 2) * useed_log)
    assert f.min_normal == f.min_subnormal == 2.0 ** (-(n - 2) * useed_log)
    assert f.emax == (n - 2) * 4 and f.emin == -(n - 2) * 4
    # at 1 the posit has n - 1 (sign) - 2 (regime) - es fraction bits
    assert f.eps == 2.0 ** -(n - 3 - 2)
    assert f.precision == n - 3 - 2 + 1


@pytest.mark.parametrize("n,es", [(8, 0), (16, 1), (12, 3), (10, 4), (5, 2), (2, 0), (3, 1), (32, 4)])
def test_posit_custom(n, es):
    f = lowp.PositFormat(n, es=es)
    assert f.max == 2.0 ** ((n - 2) * 2**es)
    assert f.min_normal == 1 / f.max
    one = 1 << (n - 2)
    codes = np.array([one - 1, one, one + 1], np.uint32)
    below, v1, above = lowp.decode(codes, f, np.float64)
    assert v1 == 1.0
    # eps: the gap above 1, or below it when 1 is maxpos (n = 2); never NaN
    assert f.eps == (above - 1 if n > 2 else 1 - below)


def test_int_format():
    f = lowp.format("int8")
    assert isinstance(f, lowp.IntFormat) and f.bits == 8 and f.signed
    assert f.dtype == np.dtype(np.int8)
    u = lowp.IntFormat(4, signed=False)
    assert u.max == 15 and u.min == 0 and u.bits == 4


ALL_FORMATS = list(lowp.named_formats().values()) + CUSTOM_FLOATS + [lowp.PositFormat(12, 1), lowp.IntFormat(4, False)]


@pytest.mark.parametrize("fmt", ALL_FORMATS, ids=repr)
def test_immutable(fmt):
    with pytest.raises(AttributeError):
        fmt.bits = 3
    with pytest.raises(AttributeError):
        fmt._spec = ("float", 1, 1, 0, False, None, True)
    with pytest.raises(AttributeError):
        del fmt._spec
    with pytest.raises(AttributeError):
        fmt.new_attribute = 1


@pytest.mark.parametrize("fmt", ALL_FORMATS, ids=repr)
def test_pickle_round_trip(fmt):
    for proto in range(2, pickle.HIGHEST_PROTOCOL + 1):
        g = pickle.loads(pickle.dumps(fmt, protocol=proto))
        assert g == fmt and hash(g) == hash(fmt) and type(g) is type(fmt)
        assert g.name == fmt.name and repr(g) == repr(fmt)
        assert (g.max, g.min_normal, g.min_subnormal, g.eps, g.bits) == (fmt.max, fmt.min_normal, fmt.min_subnormal,
                                                                         fmt.eps, fmt.bits)


@pytest.mark.parametrize("fmt", ALL_FORMATS, ids=repr)
def test_repr_evaluates_back(fmt):
    r = repr(fmt)
    ns = {"lowp": lowp, "FloatFormat": lowp.FloatFormat, "PositFormat": lowp.PositFormat, "IntFormat": lowp.IntFormat}
    assert eval(r, ns) == fmt  # noqa: S307 - our own repr
    if fmt.name:
        assert fmt.name in r


def test_hash_and_equality():
    a = lowp.FloatFormat(4, 3, nan="fnuz")
    b = lowp.FloatFormat(4, 3, bias=8, nan="fnuz")
    assert a == b and hash(a) == hash(b) and a == lowp.format("float8_e4m3fnuz")
    assert lowp.FloatFormat(8, 7) == lowp.format("bf16")
    assert len({lowp.FloatFormat(8, 7), lowp.format("bfloat16"), lowp.format(ml_dtypes.bfloat16)}) == 1
    distinct = [lowp.FloatFormat(4, 3), lowp.FloatFormat(4, 3, bias=11), lowp.FloatFormat(4, 3, nan="fn"),
                lowp.FloatFormat(4, 3, subnormals=False), lowp.FloatFormat(4, 3, inf=False),
                lowp.FloatFormat(4, 3, nan=None), lowp.PositFormat(8, 2), lowp.PositFormat(8, 0),
                lowp.IntFormat(8), lowp.IntFormat(8, signed=False)]
    assert len(set(distinct)) == len(distinct)
    for i, x in enumerate(distinct):
        for j, y in enumerate(distinct):
            assert (x == y) == (i == j)
    assert lowp.format("int8") != 8 and lowp.format("bf16") != "bf16"
    d = {lowp.format("e4m3fn"): 1}
    assert d[lowp.FloatFormat(4, 3, nan="fn")] == 1


def test_equal_formats_report_the_same_dtype():
    for f, name in [(lowp.FloatFormat(8, 7), "bf16"), (lowp.FloatFormat(4, 3, nan="fn"), "e4m3fn"),
                    (lowp.FloatFormat(5, 10), "float16"), (lowp.IntFormat(8), "int8"), (lowp.PositFormat(16), "posit16")]:
        assert f == lowp.format(name) and f.dtype == lowp.format(name).dtype
    assert lowp.FloatFormat(8, 7).dtype == np.dtype(lowp.bfloat16)
    assert lowp.FloatFormat(4, 3, bias=11).dtype is None


def test_replace():
    f = lowp.format("e4m3").replace(subnormals=False)
    assert f == lowp.FloatFormat(4, 3, subnormals=False)
    assert lowp.format("e4m3").replace(nan="fnuz") == lowp.format("e4m3fnuz")
    assert lowp.FloatFormat(4, 3, bias=11).replace(man_bits=2) == lowp.FloatFormat(4, 2, bias=11)
    with pytest.raises(TypeError, match="replace"):
        lowp.format("e4m3").replace(colour="red")


ALIASES = {
    "bf16": "bfloat16", "BFloat16": "bfloat16", "fp16": "float16", "half": "float16", "e5m2": "float8_e5m2",
    "e4m3fn": "float8_e4m3fn", "E4M3FN": "float8_e4m3fn", "e4m3": "float8_e4m3", "e4m3fnuz": "float8_e4m3fnuz",
    "e5m2fnuz": "float8_e5m2fnuz", "p8": "posit8", "posit16": "posit16", "p32": "posit32", "i8": "int8",
    "int8": "int8", "fp32": "float32", "double": "float64",
}


@pytest.mark.parametrize("alias,name", ALIASES.items())
def test_format_by_name(alias, name):
    f = lowp.format(alias)
    assert f.name == name and f is lowp.named_formats()[name]


@pytest.mark.parametrize("name", FLOAT_NAMES + list(POSIT_NAMES) + ["int8"])
def test_format_canonical_names(name):
    f = lowp.format(name)
    assert f.name == name and lowp.format(f) is f


@pytest.mark.parametrize("name", ML_FLOAT_NAMES)
def test_format_from_ml_dtypes(name):
    t = getattr(ml_dtypes, name)
    for x in (t, np.dtype(t), np.zeros(1, t).dtype):
        assert lowp.format(x) == lowp.format(name)
    # the dtype a named float format reports stores it
    dt = lowp.format(name).dtype
    assert dt is not None and dt.name == name and dt.itemsize == 1 + (name == "bfloat16")


@pytest.mark.parametrize("t,name", [(np.float16, "float16"), (np.float32, "float32"), (np.float64, "float64"),
                                    (np.int8, "int8"), ("float16", "float16"), ("<f4", "float32"), ("i1", "int8")])
def test_format_from_numpy(t, name):
    assert lowp.format(np.dtype(t)) == lowp.format(name)
    assert lowp.format(t).name == name
    assert lowp.format(name).dtype == np.dtype(t)


@pytest.mark.parametrize("bad", ["bf17", "float8", "", "posit", "posit<8,1>", "posit(16,1)"])
def test_format_unknown_name(bad):
    with pytest.raises(ValueError, match="fmt"):
        lowp.format(bad)


@pytest.mark.parametrize("bad", [np.complex64, np.dtype(object), np.int16, np.uint8, np.bool_, 3.5, None, [1, 2]])
def test_format_unsupported_type(bad):
    with pytest.raises(TypeError, match="fmt"):
        lowp.format(bad)


FINFO_ATTRS = ["bits", "max", "min", "eps", "epsneg", "tiny", "smallest_normal", "smallest_subnormal", "nmant",
               "nexp", "iexp", "maxexp", "minexp", "machep", "negep", "precision", "resolution"]


@pytest.mark.parametrize("name", ML_FLOAT_NAMES)
def test_finfo_matches_ml_dtypes(name):
    t = getattr(ml_dtypes, name)
    ours, theirs = lowp.finfo(t), ml_dtypes.finfo(t)
    for attr in FINFO_ATTRS:
        assert float(getattr(ours, attr)) == float(getattr(theirs, attr)), attr
    assert lowp.finfo(name).max == ours.max
    # The dtype given (ml_dtypes' own), its limits its scalars, as ml_dtypes.finfo's.
    assert ours.dtype == np.dtype(t) and type(ours.max) is np.dtype(t).type


@pytest.mark.parametrize("t", [np.float16, np.float32, np.float64])
def test_finfo_matches_numpy(t):
    ours, theirs = lowp.finfo(t), np.finfo(t)
    for attr in FINFO_ATTRS:
        assert float(getattr(ours, attr)) == float(getattr(theirs, attr)), attr


def test_finfo_as_numpy_byte_order_complex_and_equality():
    """As numpy.finfo: a byte-swapped dtype gives the native one, complex types their
    components' limits, and two finfo of one type compare equal (numpy caches them)."""
    f = lowp.finfo(np.dtype(lowp.bfloat16).newbyteorder(">"))
    assert f.dtype == np.dtype(lowp.bfloat16) and f.dtype.isnative and type(f.max) is lowp.bfloat16
    for c, t in ((np.complex64, np.float32), (np.complex128, np.float64)):
        assert lowp.finfo(c).dtype == np.finfo(c).dtype == np.dtype(t)
        assert float(lowp.finfo(c).eps) == float(np.finfo(c).eps)
        assert lowp.finfo(np.dtype(c).name).dtype == lowp.finfo(np.dtype(c).str).dtype == np.dtype(t)
    assert lowp.finfo(lowp.bfloat16) == lowp.finfo(lowp.bfloat16) == lowp.finfo(np.dtype(lowp.bfloat16))
    assert hash(lowp.finfo(lowp.bfloat16)) == hash(lowp.finfo(lowp.bfloat16))
    assert lowp.finfo(lowp.bfloat16) != lowp.finfo(np.float16)
    assert lowp.finfo(ml_dtypes.bfloat16) != lowp.finfo(lowp.bfloat16)  # (limits of different types)


@pytest.mark.parametrize("fmt", [lowp.format(n) for n in POSIT_NAMES] + [lowp.PositFormat(12, 1)], ids=repr)
def test_finfo_posit(fmt):
    fi = lowp.finfo(fmt)
    one = np.array([0x40 << (fmt.nbits - 8)], np.uint32)
    below = lowp.decode(one - 1, fmt, np.float64)[0]
    above = lowp.decode(one + 1, fmt, np.float64)[0]
    assert fi.eps == above - 1 and fi.epsneg == 1 - below
    assert fi.max == fmt.max and fi.min == -fmt.max and fi.tiny == fmt.min_normal
    assert repr(fmt) in repr(fi)


@pytest.mark.parametrize("fmt", CUSTOM_FLOATS, ids=repr)
def test_finfo_custom(fmt):
    fi = lowp.finfo(fmt)
    s = FloatSpec.of(fmt)
    assert fi.max == float(s.max) and fi.eps == 2.0**-fmt.man_bits and fi.nmant == fmt.man_bits
    # The gap below 1: the largest value below it, by the exact reference.
    below = round_float(1.0 - 2.0**-40, s, "down")
    assert fi.epsneg == 1.0 - below and fi.bits == fmt.bits
    assert 0 < fi.resolution <= 1 or fi.resolution == fmt.max
    assert lowp.round(np.array([fi.resolution]), fmt)[0] == fi.resolution


def test_finfo_rejects_int():
    with pytest.raises(TypeError, match="iinfo"):
        lowp.finfo("int8")


def test_named_formats_complete():
    names = set(lowp.named_formats())
    assert {"bfloat16", "float16", "float8_e5m2", "float8_e4m3fn", "float8_e4m3", "float8_e4m3fnuz",
            "float8_e5m2fnuz", "posit8", "posit16", "posit32", "int8"} <= names


def test_eps_and_epsneg_where_one_is_subnormal_or_smallest_normal():
    f = lowp.FloatFormat(1, 7, bias=-4, nan=None)  # 1 is subnormal: units of 0.25
    assert f.eps == 0.25 == float(lowp.ulp(1.0, f)) and lowp.finfo(f).epsneg == 0.25
    g = lowp.FloatFormat(7, 3, bias=1, nan=None)  # 1 is the smallest normal: subnormals below
    assert lowp.finfo(g).epsneg == 0.125 and g.eps == 0.125
