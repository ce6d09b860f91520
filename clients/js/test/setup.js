// Node 18 has Web Crypto only as node:crypto's webcrypto; browsers and Node 20+ have it global.
import {webcrypto} from "node:crypto";

if (globalThis.crypto === undefined) globalThis.crypto = /** @type {Crypto} */ (webcrypto);
