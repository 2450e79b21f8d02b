// The payments handler of ../ledger.go behind express-idempotency (the npm
// package, at the version package-lock.json pins), configured as its
// README shows and nothing more: the default Idempotency-Key header, the
// in-memory data adapter, the default intent and response validators. The
// handler checks isHit, as the README says it must, and reports an error
// with reportError before it answers 500.
//
// node server.js listens on 127.0.0.1 at a port of the system's choice and
// prints "listening on http://127.0.0.1:PORT".
'use strict';

const express = require('express');
const { idempotency, getSharedIdempotencyService } = require('express-idempotency');

const maxSlowMs = 10000;
const app = express();
const counts = new Map(); // by caller and customer
let seq = 0;

function caller(req) {
  const auth = req.get('Authorization') || '';
  return auth.startsWith('Bearer ') && auth.length > 7 ? auth.slice(7) : null;
}

app.post('/payments', express.json(), idempotency(), (req, res) => {
  const service = getSharedIdempotencyService();
  if (service.isHit(req)) {
    return; // the middleware answered: a replay, or a refusal
  }
  const who = caller(req);
  if (!who) {
    return res.status(401).json({ error: 'no bearer token' });
  }
  const p = req.body || {};
  if (typeof p.customer !== 'string' || p.customer === '' || !(p.amount > 0) || typeof p.currency !== 'string' || p.currency === '') {
    return res.status(400).json({ error: 'want {customer, amount > 0, currency}' });
  }
  let delay = 0;
  const slow = req.get('Slow');
  if (slow) {
    const m = /^(\d+(?:\.\d+)?)(ms|s)$/.exec(slow);
    delay = m ? Number(m[1]) * (m[2] === 's' ? 1000 : 1) : NaN;
    if (!(delay >= 0 && delay <= maxSlowMs)) {
      return res.status(400).json({ error: 'Slow: want a duration up to 10s' });
    }
  }
  setTimeout(() => {
    if (req.get('Fail')) {
      service.reportError(req);
      return res.status(500).json({ error: 'failed as asked' });
    }
    seq++;
    const id = 'pay_' + seq;
    const k = who + '\0' + p.customer;
    counts.set(k, (counts.get(k) || 0) + 1);
    res.location('/payments/' + id);
    res.cookie('session', who + '-' + id, { httpOnly: true });
    res.status(201).json({ id, customer: p.customer, amount: p.amount, currency: p.currency });
  }, delay);
});

app.get('/payments', (req, res) => {
  const who = caller(req);
  if (!who) {
    return res.status(401).json({ error: 'no bearer token' });
  }
  res.json({ count: counts.get(who + '\0' + (req.query.customer || '')) || 0 });
});

const server = app.listen(0, '127.0.0.1', () => {
  console.log('listening on http://127.0.0.1:' + server.address().port);
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
