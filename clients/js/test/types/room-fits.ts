// livekit-client's Room is what RoomBinding takes: checked by the TypeScript compiler against
// the package's own declarations (npm run check), not run.
import {Room} from "livekit-client";
import type {LiveKitRoom} from "../../src/livekit.js";
import {RoomBinding} from "../../src/livekit.js";
import type {Session} from "../../src/aim-realtime.js";
import {FakeRoom} from "../fake-room.js";

export function bind(session: Session): RoomBinding[] {
  const room: LiveKitRoom = new Room();
  const fake: LiveKitRoom = new FakeRoom();
  return [new RoomBinding(session, room), new RoomBinding(session, fake)];
}
