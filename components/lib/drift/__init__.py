"""The drift statistics: the newest data's columns against the champion's reference statistics, and a
candidate's predictions against the champion's. Plain functions of frames, arrays and ``WatchConfig``."""
