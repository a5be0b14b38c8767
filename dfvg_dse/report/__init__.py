"""Pure summaries of specs and results, ready for the CLI to print as JSON or tables."""

from dfvg_dse.report.tables import (cost_records, cost_warnings, device_inputs, dynamic_record, estimate_record,
                                    head_record, hw_record, hw_summary, lookup_record, model_record, profile_record, simulation_record, tree_record,
                                    weight_stream_bandwidth_bytes_per_s)

__all__ = ["cost_records", "cost_warnings", "device_inputs", "dynamic_record", "estimate_record", "simulation_record", "profile_record", "tree_record", "head_record", "lookup_record", "hw_record", "hw_summary", "model_record",
           "weight_stream_bandwidth_bytes_per_s"]
