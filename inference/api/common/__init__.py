"""What every API of inference/api shares: errors, auth, the JSON body parser, sampling checks,
the checked chat job, the model check, the one streaming path (``stream.Formatter``) and the SSE
response."""
