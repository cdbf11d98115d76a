"""Small models for the OpenVINO and XNNPACK 4-bit tests (every linear groupable by 32)."""
