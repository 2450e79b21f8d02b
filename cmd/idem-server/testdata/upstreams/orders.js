// orders.js: a tiny orders API in Node.js (node:http only, no npm packages),
// with no idempotency of its own, for idem-server's gateway to stand in
// front of (docs/gateway.md). It counts its own effects:
//
//   POST /orders {"customer":"c","amount":1}  creates an order: 201 {"id","customer","amount"}, Location
//                                             (400 for a body it cannot read); with X-Hold: 1 the answer
//                                             waits for POST /release (the order is made at once)
//   GET  /orders?customer=c                   {"count": orders made for c}
//   POST /release                             answers every held request
//
// It listens on 127.0.0.1:PORT (argv[2], or $PORT, or 0 for any free port),
// prints "listening on http://127.0.0.1:PORT" once it does, and "order ID
// CUSTOMER" on each order made, both on standard output.
'use strict';
const http = require('node:http');

const counts = new Map();
let next = 0;
let held = [];

function send(res, status, body, headers = {}) {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text), ...headers });
  res.end(text);
}

const server = http.createServer((req, res) => {
  const url = new URL(req.url, 'http://localhost');
  if (req.method === 'GET' && url.pathname === '/orders') {
    send(res, 200, { count: counts.get(url.searchParams.get('customer') || '') || 0 });
    return;
  }
  if (req.method === 'POST' && url.pathname === '/release') {
    const waiting = held;
    held = [];
    waiting.forEach((answer) => answer());
    res.writeHead(204);
    res.end();
    return;
  }
  if (req.method !== 'POST' || url.pathname !== '/orders') {
    send(res, 404, { error: 'not found' });
    return;
  }
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    let order;
    try {
      order = JSON.parse(Buffer.concat(chunks).toString('utf8'));
    } catch (e) {
      order = null;
    }
    if (!order || typeof order.customer !== 'string' || order.customer === '' || !Number.isInteger(order.amount)) {
      send(res, 400, { error: 'want {"customer": string, "amount": integer}' });
      return;
    }
    next += 1;
    const id = 'ord_' + next;
    counts.set(order.customer, (counts.get(order.customer) || 0) + 1);
    process.stdout.write(`order ${id} ${order.customer}\n`);
    const answer = () => send(res, 201, { id, customer: order.customer, amount: order.amount }, { Location: '/orders/' + id });
    if (req.headers['x-hold'] === '1') {
      held.push(answer);
    } else {
      answer();
    }
  });
});

server.listen(Number(process.argv[2] || process.env.PORT || 0), '127.0.0.1', () => {
  process.stdout.write(`listening on http://127.0.0.1:${server.address().port}\n`);
});
