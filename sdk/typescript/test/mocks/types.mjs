// idem:handler/types@0.1.0 declares types only; a transpiled component imports it all the same.
export {};
