"""Pure summaries of specs and results, ready for the CLI to print as JSON or tables."""

from dfvg_dse.report.tables import cost_records, hw_record, hw_summary, model_record, parse_int_list

__all__ = ["cost_records", "hw_record", "hw_summary", "model_record", "parse_int_list"]
