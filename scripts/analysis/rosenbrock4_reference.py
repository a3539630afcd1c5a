"""rosenbrock4 at 50 evaluations: what other surrogates and local optimisers reach.

Reference numbers for docs/experiments/public-mean-ceiling.md ("How far the four public
problems let the mean go"), not part of the product or its tests. It runs on the unit cube of the log-scaled space, like tune:

  GP loop (ard, add2, both): a NumPy re-implementation of tune's GP ask (the same output warp
  and prior-mean quantile, its own hyper-parameter priors, Matern-5/2, log EI over random and perturbed candidates polished by L-BFGS-B,
  a refining ask every 5th trial from trial 20) with one of three kernels: ARD over all four
  coordinates (tune's), a sum of 2-d ARD kernels over every pair of coordinates (Rosenbrock is
  a sum of pair terms), or both summed.
  Local optimisers (Nelder-Mead, Powell, COBYLA): scipy, started from the best of the same 9
  scrambled Sobol points, 41 further evaluations.

Score @50 as in the benchmark: 100 * (1 - best / 3.3) clipped to [-100, 100], 3.3 being random
search's median best at 50 trials; the mean is over seeds.
Needs numpy and scipy:  python3 rosenbrock4_reference.py ard --seeds 20
"""
import numpy as np, itertools
from scipy.optimize import minimize
from scipy.stats import qmc, norm
D=4
def rosen(u):
    x=0.01*1000.0**np.asarray(u)
    return sum(100*(x[i+1]-x[i]**2)**2+(1-x[i])**2 for i in range(3))
def warp(y):
    s=np.sort(y); mn=s[0]; mx=s[-1]; med=np.quantile(s,.5)
    if mx-med>5*(med-mn) and mx>mn:
        c=max(np.quantile(s,.25)-mn,1e-9*(mx-mn)); w=np.log1p((y-mn)/c)
    else: w=y.copy()
    ce=np.quantile(w,.5); iqr=np.quantile(w,.75)-np.quantile(w,.25); sc=iqr/1.349 if iqr>1e-12 else (w.std() or 1)
    z=(w-ce)/sc; z=np.where(z>2.5,2.5+np.log1p(np.maximum(z-2.5,0)),z)
    sd=z.std() or 1; return (z-np.quantile(z,.9))/sd
def m52(r2):
    r=np.sqrt(np.maximum(r2,0)); return (1+np.sqrt(5)*r+5/3*r2)*np.exp(-np.sqrt(5)*r)
class Model:
    def __init__(s,kind,d):
        s.comps=[]
        if kind in('ard','both'): s.comps.append(tuple(range(d)))
        if kind in('add2','both'): s.comps+= list(itertools.combinations(range(d),2))
    def K(s,th,A,B):
        k=np.zeros((len(A),len(B))); j=0
        for c in s.comps:
            amp=np.exp(th[j]); ls=np.exp(th[j+1:j+1+len(c)]); j+=1+len(c)
            r2=sum(((A[:,None,i]-B[None,:,i])/l)**2 for i,l in zip(c,ls))
            k+=amp*m52(r2)
        return k
    def nlml(s,th,X,y):
        n=len(X); Kx=s.K(th,X,X)+ (np.exp(th[-1])+1e-8)*np.eye(n)
        try: L=np.linalg.cholesky(Kx)
        except np.linalg.LinAlgError: return 1e10
        a=np.linalg.solve(L.T,np.linalg.solve(L,y))
        # log-normal priors: amplitude (0, 2), length scale (ln 0.5, 1.5), noise (-8, 3)
        pr=0; j=0
        for c in s.comps:
            pr+=0.5*(th[j]/2)**2; pr+=sum(0.5*((t-np.log(0.5))/1.5)**2 for t in th[j+1:j+1+len(c)]); j+=1+len(c)
        pr+=0.5*((th[-1]+8)/3)**2
        return 0.5*y@a+np.log(np.diag(L)).sum()+pr
    def fit(s,X,y,th0):
        starts=[th0] if th0 is not None else []
        t=[]
        for c in s.comps: t+= [np.log(1.0/len(s.comps))]+[np.log(0.3)]*len(c)
        starts.append(np.array(t+[-6.0]))
        best=None
        for st in starts:
            r=minimize(s.nlml,st,args=(X,y),method='L-BFGS-B',bounds=[(-8,4)]*(len(st)-1)+[(-14,1)],options={'maxiter':60})
            if best is None or r.fun<best.fun: best=r
        s.th=best.x; s.X=X
        Kx=s.K(s.th,X,X)+(np.exp(s.th[-1])+1e-8)*np.eye(len(X)); s.L=np.linalg.cholesky(Kx)
        s.a=np.linalg.solve(s.L.T,np.linalg.solve(s.L,y)); return s.th
    def post(s,U):
        k=s.K(s.th,U,s.X); mu=k@s.a; v=np.linalg.solve(s.L,k.T)
        amp=sum(np.exp(s.th[j]) for j in s.offs())
        var=np.maximum(amp-np.sum(v*v,0),1e-12); return mu,var
    def offs(s):
        o=[];j=0
        for c in s.comps: o.append(j); j+=1+len(c)
        return o
def logei(mu,var,best):
    sd=np.sqrt(var); z=(best-mu)/sd
    # log(sd*(z*Phi(z)+phi(z)))
    out=np.where(z>-5, np.log(np.maximum(z*norm.cdf(z)+norm.pdf(z),1e-300)), norm.logpdf(z)-2*np.log(np.abs(z)))
    return np.log(sd)+out
def run(f,d,kind,seed,T=50,ninit=9):
    rng=np.random.default_rng(seed)
    X=qmc.Sobol(d,scramble=True,seed=seed).random(ninit); y=np.array([f(x) for x in X])
    m=Model(kind,d); th=None
    while len(X)<T:
        z=warp(y); th=m.fit(X,z,th); ib=np.argmin(z); best=z[ib]; n=len(X)
        exploit = n>=20 and n%5==4
        if exploit:
            lo=np.maximum(X[ib]-0.03,0); hi=np.minimum(X[ib]+0.03,1)
            C=lo+(hi-lo)*rng.random((512,d))
            sc=-m.post(C)[0]
            obj=lambda u: m.post(u[None])[0][0]
            bnds=list(zip(lo,hi))
        else:
            C=np.vstack([rng.random((512,d))]+[np.clip(X[i]+s*rng.standard_normal((16,d)),0,1) for i in np.argsort(z)[:5] for s in (0.02,0.1)])
            mu,var=m.post(C); sc=logei(mu,var,best)
            obj=lambda u: -logei(*m.post(u[None]),best)[0]
            bnds=[(0,1)]*d
        top=np.argsort(-sc)[:3]; bu=C[top[0]]; bv=-sc[top[0]]
        for i in top:
            r=minimize(obj,C[i],method='L-BFGS-B',bounds=bnds,options={'maxiter':30})
            if r.fun<bv: bv=r.fun; bu=r.x
        X=np.vstack([X,bu]); y=np.append(y,f(bu))
    return y

def local(meth, seed, T=50, ninit=9):
    X=qmc.Sobol(D,scramble=True,seed=seed).random(ninit); hist=[rosen(x) for x in X]
    def f(u):
        v=rosen(np.clip(u,0,1)); hist.append(v); return v
    x0=X[int(np.argmin(hist))]
    if meth=='COBYLA':
        minimize(f,x0,method=meth,options={'maxiter':T-ninit,'rhobeg':0.1})
    else:
        minimize(f,x0,method=meth,bounds=[(0,1)]*D,options={'maxfev':T-ninit})
    return np.array(hist[:T])

if __name__=='__main__':
    import argparse
    ap=argparse.ArgumentParser(description=__doc__)
    ap.add_argument('method', choices=['ard','add2','both','Nelder-Mead','Powell','COBYLA'])
    ap.add_argument('--seeds', type=int, default=20)
    a=ap.parse_args()
    scores=[]; bests=[]
    for s in range(a.seeds):
        y=run(rosen,D,a.method,s) if a.method in ('ard','add2','both') else local(a.method,s)
        bests.append(float(y[:50].min()))
        scores.append(float(np.clip(100*(1-bests[-1]/3.3),-100,100)))
    print(f"{a.method}: {a.seeds} seeds, mean best @50 {np.mean(bests):.3f}, "
          f"mean score @50 {np.mean(scores):.1f}, worst {min(scores):.1f}")
