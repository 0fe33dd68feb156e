# Unseen shape (session 22): N processes, each two streams of 512^3 fp16 matmuls, a synchronize
# every 16 rounds; prints the process's matmuls per second over S seconds after 1 s of warm-up.
import sys, time, torch
secs = float(sys.argv[1])
a = torch.randn(512, 512, device="cuda", dtype=torch.float16)
ss = [torch.cuda.Stream() for _ in range(2)]
outs = [torch.empty_like(a) for _ in ss]
def rnd():
    for _ in range(16):
        for s, o in zip(ss, outs):
            with torch.cuda.stream(s):
                torch.mm(a, a, out=o)
    torch.cuda.synchronize()
t = time.time()
while time.time() - t < 1: rnd()
n, t = 0, time.time()
while time.time() - t < secs:
    rnd(); n += 32
print(f"rate {n / (time.time() - t):.0f}", flush=True)
