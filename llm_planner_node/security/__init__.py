"""Robot-link security: per-robot keys, signed segments and statuses with replay protection, and SROS2 policies."""
