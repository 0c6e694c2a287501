"""What stage1's frame backends share (`mimi`, `nemotron`): a model stepped
over a batch of rows, one a session, every 80 ms (lockstep.py); a session's
frames in and audio chunks out, its responses and cancels (session.py); each
frame's audio cut to exact frames at the session's rate (resampler.py).
"""
