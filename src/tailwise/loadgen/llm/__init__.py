"""What an LLM server is asked and what it answers, below the wire.

``apis`` (the ``--api`` kinds: paths, bodies, answer readers), ``openai`` (bodies,
prompts, credentials), ``stream`` (what each event of a token stream says) and
``answers`` (the AnswerBook: an answer's tokens, chunks, usage and notes, booked
into its record). Nothing here sends a byte.
"""
