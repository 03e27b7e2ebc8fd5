"""Currencies (ISO 4217) and rounding to their minor unit.

Only codes in the table below are accepted: the table says how many digits a cost is
rounded to, and a code missing from it is far more often a typo than a currency.
"""

from __future__ import annotations

from board.errors import Unprocessable

# ISO 4217 code → minor units (digits after the decimal point).
MINOR_UNITS: dict[str, int] = {
    **dict.fromkeys(
        (
            "AED AUD BGN BRL CAD CHF CNY CZK DKK EGP EUR GBP HKD HUF IDR ILS INR MAD MXN "
            "MYR NOK NZD PHP PKR PLN QAR RON RSD RUB SAR SEK SGD THB TRY TWD UAH USD ZAR"
        ).split(),
        2,
    ),
    **dict.fromkeys("CLP ISK JPY KRW UGX VND XAF XOF".split(), 0),
    **dict.fromkeys("BHD IQD JOD KWD LYD OMR TND".split(), 3),
}


def check_currency(code: str) -> str:
    if code not in MINOR_UNITS:
        raise Unprocessable(
            f"currency {code[:12]!r} is not an ISO 4217 code the board knows; use an upper-case "
            "code such as EUR, USD, GBP, CHF or JPY."
        )
    return code
