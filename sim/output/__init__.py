"""What a run produced, for a user: the step log (:mod:`.steplog`), the request table
(:mod:`.requests`), summary.json (:mod:`.summary`, with the steady window and verdict of
:mod:`.steady`), the files (:mod:`.files`), the text tables (:mod:`.tables`), the HTML
report (:mod:`.report`: its header, :mod:`.header`; figures, :mod:`.report_figures` and
:mod:`.report_memory`; time series, :mod:`.series`) and what ``pagesim compare`` shows
(:mod:`.compare`, :mod:`.compare_page`, the belady row of :mod:`.yardstick`). Every page
shares :mod:`.page` (plotly.js once per folder, tables, "none" for empty series)."""

from sim.output.files import write_outputs
from sim.output.steplog import StepLog
from sim.output.summary import summarize
from sim.output.tables import compare_table, format_summary_table

__all__ = ["StepLog", "compare_table", "format_summary_table", "summarize", "write_outputs"]
