"""Tables in a terminal, kept readable at its width: a table wider than the terminal folds into one block per
row (each column's name beside its value) instead of cutting headers, wrapping values over lines or
dropping columns."""

from __future__ import annotations

from typing import Any


def fitted(table: Any, console: Any) -> Any:
    """``table`` (a rich Table) where its natural width fits ``console``; else the same cells folded, one
    block per row titled by the row's first cell, with the table's title and caption above and below."""
    from rich.console import Group
    from rich.measure import Measurement
    from rich.table import Table
    from rich.text import Text

    natural = Measurement.get(console, console.options.update_width(10**6), table).maximum
    if natural <= console.width:
        return table
    columns = table.columns
    blocks: list[Any] = [Text(str(table.title), style="italic")] if table.title else []
    for cells in zip(*(list(column.cells) for column in columns)):
        block = Table(title=cells[0], title_justify="left", show_header=False, box=None, padding=(0, 1))
        block.add_column(style="dim", no_wrap=True)
        block.add_column(overflow="fold")
        for column, cell in zip(columns[1:], cells[1:]):
            block.add_row(str(column.header).replace("\n", " "), cell)
        blocks.append(block)
    if table.caption:
        blocks.append(Text(str(table.caption), style="dim"))
    return Group(*blocks)
