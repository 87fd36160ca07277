"""The training suite: forward and backward (BACKWARD = True) of the ops a transformer trains with,
each on two to four workloads at today's models' shapes (Llama 3 8B and 70B: hidden 4096 and 8192,
MLP 14336 and 28672, vocabulary 128256), and one irregular token count (1000: no power of two)."""
