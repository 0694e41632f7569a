"""Plain-text tables and the figures in them."""


def fmt(v, spec=".2f", unit=""):
    return "-" if v is None else f"{v:{spec}}{unit}"


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def table(header, rows):
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    line = lambda r: "  ".join(str(x).rjust(w) if i else str(x).ljust(w) for i, (x, w) in enumerate(zip(r, widths)))
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])

