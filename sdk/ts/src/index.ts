// The Spark IM browser SDK: the frame codec and the client.
export * from "./frame.js";
export * from "./protocol.js";
export * from "./store.js";
export * from "./client.js";
