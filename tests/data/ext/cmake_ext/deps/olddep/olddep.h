int olddep_value(void);
