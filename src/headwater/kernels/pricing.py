"""Bond and option pricing, row by row over NumPy arrays (compiled with Numba): DolphinDB's ``bondDirtyPrice``,
``bondAccrInt``, ``bondDuration``, ``bondConvexity``, ``bondYield`` and ``vanillaOption``.

Dates are days since 1970-01-01 (the evaluator's ``date`` columns); every other argument is a number. A row with
a NULL (NaN) argument gives NULL. A row whose argument is out of its domain (a frequency of 3, a basis of 7,
settlement on or after maturity, a negative volatility) gives NULL in an engine, like ``log`` of a negative number,
and is refused with :class:`~headwater.errors.GraphDefinitionError` naming the row and the argument when the
function is called directly with ``strict=True`` (the default here).

**Day-count basis** (DolphinDB's codes): 0 US (NASD) 30/360, 1 actual/actual, 2 actual/360, 3 actual/365
(fixed), 4 European 30/360. **Frequency**: 1, 2, 4 or 12 coupons a year; a zero-coupon bond is ``bond_type=1``
(DolphinDB's discount bond: no coupon, 100 at maturity), whose frequency may be 0 or NULL.

**Coupon bonds follow DolphinDB's documented benchmark, Excel** (``PRICE``, ``ACCRINT``, ``DURATION``,
``YIELD``): coupon dates roll back from maturity by whole periods (end-of-month maturities keep month ends);
``A`` is the days from the previous coupon to settlement, ``E`` the days of that coupon period (basis 1: actual;
0 and 4: 360/f; 2: 360/f; 3: 365/f), ``DSC = E - A`` (30/360) or the actual days to the next coupon; the
``N`` remaining cash flows are discounted at ``(1 + y/f) ** (k - 1 + DSC/E)``, and with one period or less left
the price is simple interest, ``(100 + 100c/f) / (1 + DSC/E * y/f)``. Actual/actual is therefore the ISMA
rule for coupon bonds. Zero-coupon bonds and options measure time with the year fraction of the basis
(actual/actual: ISDA, split at year ends).

**Options**: Black-Scholes-Merton (continuous rates ``risk_free``, ``div_yield``) for European exercise, a
Cox-Ross-Rubinstein tree (QuantLib's equal-jump variant, ``steps`` steps, exercise allowed at every node) for
American. Greeks are per unit (vega per 1.0 of volatility, rho per 1.0 of rate, theta per year), as QuantLib's.

>>> import numpy as np
>>> day = lambda s: np.datetime64(s, "D").astype(np.int64)
>>> round(float(bond_dirty_price(day("2023-01-01"), day("2030-12-31"), 0.05, 0.06, 2, basis=1)[0]), 10)  # DolphinDB: 93.73475540066079
93.7347554007
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import njit

from headwater.errors import GraphDefinitionError, clip

__all__ = [
    "BASES", "FREQUENCIES", "GREEKS", "STYLES",
    "bond_accr_int", "bond_convexity", "bond_dirty_price", "bond_duration", "bond_yield", "vanilla_option",
    "year_fraction",
]

BASES = (0, 1, 2, 3, 4)
"""DolphinDB's day-count codes: 0 US 30/360, 1 actual/actual, 2 actual/360, 3 actual/365, 4 European 30/360."""
FREQUENCIES = (1, 2, 4, 12)
"""Coupons a year (a zero-coupon bond is ``bond_type=1``)."""
BOND_TYPES = (0, 1)
"""0 fixed rate, 1 discount (zero coupon). DolphinDB's 2 (interest paid at maturity) needs the issue date,
which these functions do not take: refused."""
STYLES = ("european", "american")
GREEKS = ("npv", "delta", "gamma", "vega", "theta", "rho")
MAX_STEPS = 10_000
"""Most steps of the American tree (its cost grows with the square)."""
MAX_ITER = 1_000
"""Most iterations ``bond_yield`` may be given."""

# per-row error codes (0: fine); the message of each, for strict calls
_OK, _BAD_FREQ, _BAD_BASIS, _BAD_DATES, _BAD_TYPE, _BAD_VALUE, _NO_ROOT, _BAD_STYLE = range(8)
_MESSAGES = {
    _BAD_FREQ: ("frequency", "one of 1, 2, 4, 12 (0 or NULL only for bond_type=1)"),
    _BAD_BASIS: ("basis", "one of 0 (US 30/360), 1 (actual/actual), 2 (actual/360), 3 (actual/365), "
                          "4 (European 30/360)"),
    _BAD_DATES: ("settlement", "a date before maturity"),
    _BAD_TYPE: ("bond_type", "0 (fixed rate) or 1 (discount / zero coupon)"),
    _BAD_VALUE: ("value", "a finite number in range (prices, strikes and spots > 0, volatility >= 0, "
                          "1 + yield/frequency > 0)"),
    _NO_ROOT: ("price", "a price some yield reaches (the solver found none)"),
    _BAD_STYLE: ("style", "'european' or 'american'"),
}


# -- calendar ---------------------------------------------------------------------------------------------------
@njit(cache=True)
def _civil(days: int) -> tuple[int, int, int]:
    """(year, month, day) of a day number (days since 1970-01-01): H. Hinnant's civil_from_days."""
    z = days + 719468
    era = (z if z >= 0 else z - 146096) // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    y = yoe + era * 400
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + 3 if mp < 10 else mp - 9
    return (y + 1 if m <= 2 else y), m, d


@njit(cache=True)
def _days(y: int, m: int, d: int) -> int:
    """The day number of (year, month, day): H. Hinnant's days_from_civil."""
    y -= 1 if m <= 2 else 0
    era = (y if y >= 0 else y - 399) // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


@njit(cache=True)
def _leap(y: int) -> bool:
    return (y % 4 == 0 and y % 100 != 0) or y % 400 == 0


@njit(cache=True)
def _month_days(y: int, m: int) -> int:
    if m == 2:
        return 29 if _leap(y) else 28
    return 30 if m in (4, 6, 9, 11) else 31


@njit(cache=True)
def _add_months(days: int, months: int, end_of_month: bool) -> int:
    """``days`` moved by ``months`` (negative: back); the day is capped at the month's end, or is the month's end
    when ``end_of_month``."""
    y, m, d = _civil(days)
    total = y * 12 + (m - 1) + months
    ny, nm = total // 12, total % 12 + 1
    last = _month_days(ny, nm)
    return _days(ny, nm, last if end_of_month or d > last else d)


@njit(cache=True)
def _days360(a: int, b: int, european: bool) -> int:
    """30/360 day count from ``a`` to ``b``: European, or US (NASD, QuantLib's ``Thirty360.USA`` rules with
    February month ends)."""
    y1, m1, d1 = _civil(a)
    y2, m2, d2 = _civil(b)
    if european:
        d1 = 30 if d1 == 31 else d1
        d2 = 30 if d2 == 31 else d2
    else:
        feb1 = m1 == 2 and d1 == _month_days(y1, 2)
        feb2 = m2 == 2 and d2 == _month_days(y2, 2)
        if d2 == 31 and d1 >= 30:
            d2 = 30
        if d1 == 31:
            d1 = 30
        if feb1:
            if feb2:
                d2 = 30
            d1 = 30
    return 360 * (y2 - y1) + 30 * (m2 - m1) + (d2 - d1)


@njit(cache=True)
def _year_fraction(a: int, b: int, basis: int) -> float:
    """Years from ``a`` to ``b`` (a <= b) in ``basis``; actual/actual is the ISDA rule (split at year ends)."""
    if basis == 0:
        return _days360(a, b, False) / 360.0
    if basis == 4:
        return _days360(a, b, True) / 360.0
    if basis == 2:
        return (b - a) / 360.0
    if basis == 3:
        return (b - a) / 365.0
    if a == b:
        return 0.0
    y1, _, _ = _civil(a)
    y2, _, _ = _civil(b)
    if y1 == y2:
        return (b - a) / (366.0 if _leap(y1) else 365.0)
    total = (_days(y1 + 1, 1, 1) - a) / (366.0 if _leap(y1) else 365.0)
    total += y2 - y1 - 1
    total += (b - _days(y2, 1, 1)) / (366.0 if _leap(y2) else 365.0)
    return total


# -- coupon bonds (Excel's conventions) ---------------------------------------------------------------------------
@njit(cache=True)
def _coupon_period(settle: int, maturity: int, freq: int, basis: int) -> tuple[float, float, float, int]:
    """(A, DSC, E, N): accrued days, days to the next coupon, days of the coupon period, coupons left."""
    months = 12 // freq
    y, mm, md = _civil(maturity)
    eom = md == _month_days(y, mm)
    n = 1
    prev = _add_months(maturity, -months, eom)
    nxt = maturity
    while prev > settle:
        n += 1
        nxt = prev
        prev = _add_months(maturity, -months * n, eom)
    if basis == 0 or basis == 4:
        a = float(_days360(prev, settle, basis == 4))
        e = 360.0 / freq
        dsc = e - a
    else:
        a = float(settle - prev)
        dsc = float(nxt - settle)
        e = float(nxt - prev) if basis == 1 else (360.0 if basis == 2 else 365.0) / freq
    return a, dsc, e, n


@njit(cache=True)
def _coupon_sums(settle: int, maturity: int, coupon: float, y: float, freq: int, basis: int,
                 redemption: float) -> tuple[float, float, float, float, float, int]:
    """(dirty price, sum t*pv, sum t*(t+1/f)*pv, accrued, dsc/e, n): present values at yield ``y``; t in years."""
    a, dsc, e, n = _coupon_period(settle, maturity, freq, basis)
    cf = 100.0 * coupon / freq
    accrued = cf * a / e
    x = dsc / e
    if n == 1:  # one period or less left: simple interest (Excel's PRICE)
        t = x / freq
        pv = (redemption + cf) / (1.0 + x * y / freq)
        return pv, t * pv, t * (t + 1.0 / freq) * pv, accrued, x, n
    v = 1.0 + y / freq
    price = 0.0
    s1 = 0.0
    s2 = 0.0
    for k in range(1, n + 1):
        periods = k - 1 + x
        amount = cf + (redemption if k == n else 0.0)
        pv = amount / v ** periods
        t = periods / freq
        price += pv
        s1 += t * pv
        s2 += t * (t + 1.0 / freq) * pv
    return price, s1, s2, accrued, x, n


@njit(cache=True)
def _check_bond(settle: float, maturity: float, freq: float, basis: float, bond_type: float) -> int:
    if bond_type != 0.0 and bond_type != 1.0:
        return _BAD_TYPE
    if bond_type == 0.0 and freq not in (1.0, 2.0, 4.0, 12.0):
        return _BAD_FREQ
    if bond_type == 1.0 and not (math.isnan(freq) or freq in (0.0, 1.0, 2.0, 4.0, 12.0)):
        return _BAD_FREQ
    if basis not in (0.0, 1.0, 2.0, 3.0, 4.0):
        return _BAD_BASIS
    if settle != math.floor(settle) or maturity != math.floor(maturity) or settle >= maturity:
        return _BAD_DATES
    return _OK


@njit(cache=True)
def _nan_row(*values: float) -> bool:
    for v in values:  # noqa: SIM110 (Numba compiles no generator inside any())
        if math.isnan(v):
            return True
    return False


# kinds of bond result
_DIRTY, _MACAULAY, _MODIFIED, _CONVEXITY = range(4)


@njit(cache=True)
def _bond_measure(kind: int, settle: float, maturity: float, coupon: float, y: float, freq: float, basis: float,
                  bond_type: float) -> tuple[float, int]:
    if _nan_row(settle, maturity, coupon, y, basis, bond_type) or (bond_type == 0.0 and math.isnan(freq)):
        return np.nan, _OK
    code = _check_bond(settle, maturity, freq, basis, bond_type)
    if code != _OK:
        return np.nan, code
    f = 1 if bond_type == 1.0 and (math.isnan(freq) or freq == 0.0) else int(freq)
    if not (math.isfinite(coupon) and math.isfinite(y)) or 1.0 + y / f <= 0.0:
        return np.nan, _BAD_VALUE
    s, m = int(settle), int(maturity)
    if bond_type == 1.0:  # zero coupon: 100 at maturity, compounded f times a year over the basis' year fraction
        t = _year_fraction(s, m, int(basis))
        v = 1.0 + y / f
        price = 100.0 / v ** (f * t)
        if kind == _DIRTY:
            return price, _OK
        if kind == _MACAULAY:
            return t, _OK
        if kind == _MODIFIED:
            return t / v, _OK
        return t * (t + 1.0 / f) / (v * v), _OK
    price, s1, s2, _, _, _ = _coupon_sums(s, m, coupon, y, f, int(basis), 100.0)
    if kind == _DIRTY:
        return price, _OK
    v = 1.0 + y / f
    if kind == _MACAULAY:
        return s1 / price, _OK
    if kind == _MODIFIED:
        return s1 / price / v, _OK
    return s2 / price / (v * v), _OK


@njit(cache=True)
def _bond_loop(kind: int, settle: np.ndarray, maturity: np.ndarray, coupon: np.ndarray, y: np.ndarray,
               freq: np.ndarray, basis: np.ndarray, bond_type: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = len(settle)
    out = np.empty(n)
    codes = np.zeros(n, dtype=np.int64)
    for i in range(n):
        out[i], codes[i] = _bond_measure(kind, settle[i], maturity[i], coupon[i], y[i], freq[i], basis[i],
                                         bond_type[i])
    return out, codes


@njit(cache=True)
def _accrued_loop(settle: np.ndarray, maturity: np.ndarray, coupon: np.ndarray, freq: np.ndarray,
                  par: np.ndarray, basis: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = len(settle)
    out = np.full(n, np.nan)
    codes = np.zeros(n, dtype=np.int64)
    for i in range(n):
        if _nan_row(settle[i], maturity[i], coupon[i], freq[i], par[i], basis[i]):
            continue
        code = _check_bond(settle[i], maturity[i], freq[i], basis[i], 0.0)
        if code == _OK and not (math.isfinite(coupon[i]) and math.isfinite(par[i])):
            code = _BAD_VALUE
        if code != _OK:
            codes[i] = code
            continue
        f = int(freq[i])
        a, _, e, _ = _coupon_period(int(settle[i]), int(maturity[i]), f, int(basis[i]))
        out[i] = par[i] * coupon[i] / f * a / e
    return out, codes


@njit(cache=True)
def _yield_one(settle: int, maturity: int, coupon: float, price: float, redemption: float, freq: int,
               basis: int, max_iter: int) -> tuple[float, int]:
    a, dsc, e, n = _coupon_period(settle, maturity, freq, basis)
    cf = 100.0 * coupon / freq
    accrued = cf * a / e
    if n == 1:  # Excel's closed form for one period or less
        dirty = price + accrued
        return (redemption + cf - dirty) / dirty * freq * e / dsc, _OK
    target = price + accrued

    def f_of(y: float) -> tuple[float, float]:
        """The price's distance from the target, and its derivative in the yield (-sum(t * pv) / (1 + y/f))."""
        p, s1, _, _, _, _ = _coupon_sums(settle, maturity, coupon, y, freq, basis, redemption)
        return p - target, -s1 / (1.0 + y / freq)

    # the price falls as the yield rises: bracket the root, then Newton steps kept inside the bracket
    lo = -freq + 1e-9
    hi = max(coupon, 0.0) + 1.0
    f_hi, _ = f_of(hi)
    grow = 0
    while f_hi > 0.0 and grow < 60:
        lo = hi
        hi = hi * 2.0 + 1.0
        f_hi, _ = f_of(hi)
        grow += 1
    f_lo, _ = f_of(lo)
    if f_hi > 0.0 or f_lo < 0.0:
        return np.nan, _NO_ROOT
    y = coupon if lo < coupon < hi else 0.5 * (lo + hi)
    for _ in range(max_iter):
        fy, dfy = f_of(y)
        if fy == 0.0:
            return y, _OK
        if fy > 0.0:
            lo = y
        else:
            hi = y
        step = fy / dfy if dfy != 0.0 else np.inf
        nxt = y - step
        if not (lo < nxt < hi):
            nxt = 0.5 * (lo + hi)
        if abs(nxt - y) <= 1e-15 * max(1.0, abs(y)):
            return nxt, _OK
        y = nxt
    return y, _OK


@njit(cache=True)
def _yield_loop(settle: np.ndarray, maturity: np.ndarray, coupon: np.ndarray, price: np.ndarray,
                redemption: np.ndarray, freq: np.ndarray, basis: np.ndarray,
                max_iter: int) -> tuple[np.ndarray, np.ndarray]:
    n = len(settle)
    out = np.full(n, np.nan)
    codes = np.zeros(n, dtype=np.int64)
    for i in range(n):
        if _nan_row(settle[i], maturity[i], coupon[i], price[i], redemption[i], freq[i], basis[i]):
            continue
        code = _check_bond(settle[i], maturity[i], freq[i], basis[i], 0.0)
        if code == _OK and not (math.isfinite(coupon[i]) and price[i] > 0.0 and math.isfinite(price[i])
                                and redemption[i] > 0.0 and math.isfinite(redemption[i])):
            code = _BAD_VALUE
        if code != _OK:
            codes[i] = code
            continue
        out[i], codes[i] = _yield_one(int(settle[i]), int(maturity[i]), coupon[i], price[i], redemption[i],
                                      int(freq[i]), int(basis[i]), max_iter)
    return out, codes


# -- options ------------------------------------------------------------------------------------------------------
@njit(cache=True)
def _norm_cdf(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


@njit(cache=True)
def _norm_pdf(x: float) -> float:
    return math.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)


@njit(cache=True)
def _black_scholes(greek: int, s: float, k: float, t: float, r: float, q: float, vol: float, call: bool) -> float:
    """Black-Scholes-Merton value or greek (QuantLib's units); at expiry or zero volatility, the discounted
    intrinsic value of the forward."""
    w = 1.0 if call else -1.0
    df_r = math.exp(-r * t)
    df_q = math.exp(-q * t)
    forward = s * df_q / df_r
    std = vol * math.sqrt(t)
    if std == 0.0:
        itm = w * (forward - k) > 0.0
        if greek == 0:
            return df_r * max(w * (forward - k), 0.0)
        if greek == 1:
            return w * df_q if itm else 0.0
        if greek == 4:  # theta: the rates' carry of the intrinsic value
            return (r * k * df_r - q * s * df_q) * w if itm else 0.0
        if greek == 5:
            return w * k * t * df_r if itm else 0.0
        return 0.0
    d1 = (math.log(forward / k) + 0.5 * std * std) / std
    d2 = d1 - std
    nd1 = _norm_cdf(w * d1)
    nd2 = _norm_cdf(w * d2)
    if greek == 0:
        return w * (s * df_q * nd1 - k * df_r * nd2)
    if greek == 1:
        return w * df_q * nd1
    if greek == 2:
        return df_q * _norm_pdf(d1) / (s * std)
    if greek == 3:
        return s * df_q * _norm_pdf(d1) * math.sqrt(t)
    if greek == 4:
        return (-s * df_q * _norm_pdf(d1) * vol / (2.0 * math.sqrt(t))
                + w * (q * s * df_q * nd1 - r * k * df_r * nd2))
    return w * k * t * df_r * nd2


@njit(cache=True)
def _crr(greek: int, s: float, k: float, t: float, r: float, q: float, vol: float, call: bool,
         steps: int) -> float:
    """American option on QuantLib's Cox-Ross-Rubinstein tree (equal jumps ``vol * sqrt(dt)`` in log price,
    ``pu = 1/2 + drift*dt / (2 dx)``), exercise at every node; delta and gamma from the tree's first two steps
    (Hull's differences) and theta from the Black-Scholes equation, as QuantLib's ``BinomialVanillaEngine``."""
    w = 1.0 if call else -1.0
    if t <= 0.0:
        return max(w * (s - k), 0.0) if greek == 0 else np.nan
    dt = t / steps
    dx = vol * math.sqrt(dt)
    drift = r - q - 0.5 * vol * vol
    pu = 0.5 + 0.5 * drift * dt / dx
    pd = 1.0 - pu
    disc = math.exp(-r * dt)
    values = np.empty(steps + 1)
    for j in range(steps + 1):
        values[j] = max(w * (s * math.exp((2 * j - steps) * dx) - k), 0.0)
    p2 = np.zeros(3)
    p1 = np.zeros(2)
    for i in range(steps - 1, -1, -1):
        for j in range(i + 1):
            cont = disc * (pd * values[j] + pu * values[j + 1])
            values[j] = max(cont, w * (s * math.exp((2 * j - i) * dx) - k))
        if i == 2:
            p2[:] = values[:3]
        elif i == 1:
            p1[:] = values[:2]
    p0 = values[0]
    if greek == 0:
        return p0
    s2u, s2m, s2d = s * math.exp(2.0 * dx), s, s * math.exp(-2.0 * dx)
    gamma = ((p2[2] - p2[1]) / (s2u - s2m) - (p2[1] - p2[0]) / (s2m - s2d)) / ((s2u - s2d) / 2.0)
    delta = (p1[1] - p1[0]) / (s * math.exp(dx) - s * math.exp(-dx))
    if greek == 1:
        return delta
    if greek == 2:
        return gamma
    if greek == 4:
        return r * p0 - (r - q) * s * delta - 0.5 * vol * vol * s * s * gamma
    return np.nan  # vega and rho: QuantLib's tree has none


@njit(cache=True)
def _option_loop(greek: int, settle: np.ndarray, maturity: np.ndarray, eval_date: np.ndarray, spot: np.ndarray,
                 strike: np.ndarray, r: np.ndarray, q: np.ndarray, vol: np.ndarray, is_call: np.ndarray,
                 american: np.ndarray, basis: np.ndarray, steps: int) -> tuple[np.ndarray, np.ndarray]:
    n = len(settle)
    out = np.full(n, np.nan)
    codes = np.zeros(n, dtype=np.int64)
    for i in range(n):
        if _nan_row(settle[i], maturity[i], eval_date[i], spot[i], strike[i], r[i], q[i], vol[i], is_call[i],
                    american[i], basis[i]):
            continue
        if american[i] < 0.0:
            codes[i] = _BAD_STYLE
            continue
        if basis[i] not in (0.0, 1.0, 2.0, 3.0, 4.0):
            codes[i] = _BAD_BASIS
            continue
        if (eval_date[i] > maturity[i] or settle[i] > maturity[i] or eval_date[i] != math.floor(eval_date[i])
                or maturity[i] != math.floor(maturity[i])):
            codes[i] = _BAD_DATES
            continue
        if not (spot[i] > 0.0 and strike[i] > 0.0 and vol[i] >= 0.0 and math.isfinite(spot[i])
                and math.isfinite(strike[i]) and math.isfinite(vol[i]) and math.isfinite(r[i])
                and math.isfinite(q[i])) or (american[i] == 1.0 and vol[i] == 0.0):
            codes[i] = _BAD_VALUE
            continue
        t = _year_fraction(int(eval_date[i]), int(maturity[i]), int(basis[i]))
        call = is_call[i] != 0.0
        if american[i] == 1.0:
            out[i] = _crr(greek, spot[i], strike[i], t, r[i], q[i], vol[i], call, steps)
        else:
            out[i] = _black_scholes(greek, spot[i], strike[i], t, r[i], q[i], vol[i], call)
    return out, codes


# -- the public, vectorised functions ------------------------------------------------------------------------------
def _floats(*values: Any) -> list[np.ndarray]:
    """Arguments as float64 arrays of one length (scalars broadcast); dates as day numbers."""
    arrays = [_as_float(v) for v in values]
    n = max((len(a) for a in arrays if a.ndim), default=1)
    out = []
    for a in arrays:
        if a.ndim == 0:
            a = np.full(n, float(a))
        elif len(a) != n:
            raise GraphDefinitionError(f"pricing: arguments have different lengths ({len(a)} and {n}); give "
                                       "scalars or arrays of one length")
        out.append(np.ascontiguousarray(a, dtype=np.float64))
    return out


def _as_float(value: Any) -> np.ndarray:
    a = np.asarray(value)
    if a.dtype.kind == "M":  # datetime64: whole days since the epoch
        return a.astype("datetime64[D]").astype(np.int64).astype(np.float64)
    if a.dtype == object:
        return np.array([np.nan if v is None else float(v) for v in a.ravel()], dtype=np.float64).reshape(a.shape)
    return a.astype(np.float64)


def _styles(value: Any, n: int) -> np.ndarray:
    """``'european'`` 0, ``'american'`` 1 (any case), NULL NaN, anything else -1."""
    a = np.asarray(value, dtype=object)
    items = [a.item()] * n if a.ndim == 0 else list(a)
    codes = {"european": 0.0, "american": 1.0}
    return np.array([np.nan if v is None or (isinstance(v, float) and v != v)
                     else codes.get(str(v).lower(), -1.0) for v in items], dtype=np.float64)


def _finish(name: str, out: np.ndarray, codes: np.ndarray, args: dict[str, np.ndarray], strict: bool) -> np.ndarray:
    if strict and codes.any():
        row = int(np.flatnonzero(codes)[0])
        what, expected = _MESSAGES[int(codes[row])]
        shown = ", ".join(f"{k}={clip(v[row])}" for k, v in args.items())
        raise GraphDefinitionError(f"{name}: row {row} ({shown}): bad {what}; expected {expected}")
    return out


def _bond(kind: int, name: str, settlement: Any, maturity: Any, coupon: Any, yld: Any, frequency: Any, basis: Any,
          bond_type: Any, strict: bool) -> np.ndarray:
    s, m, c, y, f, b, t = _floats(settlement, maturity, coupon, yld, frequency, basis, bond_type)
    out, codes = _bond_loop(kind, s, m, c, y, f, b, t)
    args = {"settlement": s, "maturity": m, "coupon": c, "yield": y, "frequency": f, "basis": b, "bond_type": t}
    return _finish(name, out, codes, args, strict)


def bond_dirty_price(settlement: Any, maturity: Any, coupon: Any, yld: Any, frequency: Any = np.nan,
                     basis: Any = 1, bond_type: Any = 0, *, strict: bool = True) -> np.ndarray:
    """Dirty price per 100 of face value at yield ``yld`` (DolphinDB's ``bondDirtyPrice``)."""
    return _bond(_DIRTY, "bond_dirty_price", settlement, maturity, coupon, yld, frequency, basis, bond_type, strict)


def bond_duration(settlement: Any, maturity: Any, coupon: Any, yld: Any, frequency: Any = np.nan, basis: Any = 1,
                  bond_type: Any = 0, *, modified: bool = False, strict: bool = True) -> np.ndarray:
    """Macaulay duration in years (DolphinDB's ``bondDuration``), or with ``modified`` the modified duration
    (Macaulay / (1 + yield/frequency))."""
    kind = _MODIFIED if modified else _MACAULAY
    return _bond(kind, "bond_duration", settlement, maturity, coupon, yld, frequency, basis, bond_type, strict)


def bond_convexity(settlement: Any, maturity: Any, coupon: Any, yld: Any, frequency: Any = np.nan, basis: Any = 1,
                   bond_type: Any = 0, *, strict: bool = True) -> np.ndarray:
    """Convexity in years squared (DolphinDB's ``bondConvexity``): the second derivative of the dirty price with
    respect to the yield, over the price."""
    return _bond(_CONVEXITY, "bond_convexity", settlement, maturity, coupon, yld, frequency, basis, bond_type,
                 strict)


def bond_accr_int(settlement: Any, maturity: Any, coupon: Any, frequency: Any, par: Any = 100.0, basis: Any = 1, *,
                  strict: bool = True) -> np.ndarray:
    """Interest accrued from the previous coupon date to settlement on ``par`` (DolphinDB's ``bondAccrInt``)."""
    s, m, c, f, p, b = _floats(settlement, maturity, coupon, frequency, par, basis)
    out, codes = _accrued_loop(s, m, c, f, p, b)
    args = {"settlement": s, "maturity": m, "coupon": c, "frequency": f, "par": p, "basis": b}
    return _finish("bond_accr_int", out, codes, args, strict)


def bond_yield(settlement: Any, maturity: Any, coupon: Any, price: Any, redemption: Any, frequency: Any,
               basis: Any = 1, *, method: str = "newton", max_iter: int = 100, strict: bool = True) -> np.ndarray:
    """Yield of a bond from its clean ``price`` per 100 (DolphinDB's ``bondYield``): Excel's closed form with
    one coupon period or less left, else Newton's method kept inside a bracket of the root (``method``
    ``"newton"`` or ``"brent"``: both find that root)."""
    if method not in ("newton", "brent"):
        raise GraphDefinitionError(f"bond_yield: method {clip(method)} is not supported; expected 'newton' or "
                                   "'brent' (DolphinDB's 'nm', 'bfgs', 'lbfgs' would find the same root)")
    if isinstance(max_iter, bool) or not isinstance(max_iter, int | np.integer) or not 1 <= max_iter <= MAX_ITER:
        raise GraphDefinitionError(f"bond_yield: max_iter must be an integer in 1..{MAX_ITER}, got {clip(max_iter)}")
    s, m, c, p, r, f, b = _floats(settlement, maturity, coupon, price, redemption, frequency, basis)
    out, codes = _yield_loop(s, m, c, p, r, f, b, int(max_iter))
    args = {"settlement": s, "maturity": m, "coupon": c, "price": p, "redemption": r, "frequency": f, "basis": b}
    return _finish("bond_yield", out, codes, args, strict)


def vanilla_option(settlement: Any, maturity: Any, eval_date: Any, spot: Any, strike: Any, risk_free: Any,
                   div_yield: Any, volatility: Any, is_call: Any, style: Any = "european", basis: Any = 1, *,
                   output: str = "npv", steps: int = 801, strict: bool = True) -> np.ndarray:
    """Value (``output="npv"``) or a greek (``"delta"``, ``"gamma"``, ``"vega"``, ``"theta"``, ``"rho"``) of a
    European (Black-Scholes-Merton) or American (binomial tree of ``steps`` steps) option (DolphinDB's
    ``vanillaOption`` with method ``"BS"``). Time runs from ``eval_date`` to ``maturity`` in ``basis``; an American
    option has no vega or rho (NULL), as on QuantLib's tree."""
    if output not in GREEKS:
        raise GraphDefinitionError(f"vanilla_option: output {clip(output)} is not one of {', '.join(GREEKS)}")
    if isinstance(steps, bool) or not isinstance(steps, int | np.integer) or not 3 <= steps <= MAX_STEPS:
        raise GraphDefinitionError(f"vanilla_option: steps must be an integer in 3..{MAX_STEPS}, got {clip(steps)}")
    s, m, e, sp, k, r, q, v, c, b = _floats(settlement, maturity, eval_date, spot, strike, risk_free, div_yield,
                                            volatility, is_call, basis)
    st = _styles(style, len(s))
    out, codes = _option_loop(GREEKS.index(output), s, m, e, sp, k, r, q, v, c, st, b, int(steps))
    args = {"settlement": s, "maturity": m, "eval_date": e, "spot": sp, "strike": k, "risk_free": r,
            "div_yield": q, "volatility": v, "basis": b}
    return _finish("vanilla_option", out, codes, args, strict)


def year_fraction(start: Any, end: Any, basis: Any = 1) -> np.ndarray:
    """Years from ``start`` to ``end`` in ``basis`` (actual/actual: ISDA): the option's time to expiry."""
    a, b, c = _floats(start, end, basis)
    return np.array([np.nan if _nan_row(x, y, z) else _year_fraction(int(x), int(y), int(z))
                     for x, y, z in zip(a, b, c, strict=True)])
